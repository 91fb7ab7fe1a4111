"""Recording a puzzle's artifacts and verifying its fix check (scripts/record_artifacts.py, check_catalog_gpu.py).

`verify` checks the shipped solution (must pass) and the starter (must fail); `record` profiles slow
and solution and writes the artifacts folder that replay reads.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perflab.puzzles import checker, replay, runner
from perflab.puzzles.spec import Puzzle


@dataclass
class Verification:
    solution: checker.CheckResult
    starter: checker.CheckResult

    @property
    def ok(self) -> bool:
        return self.solution.passed and not self.starter.passed

    def problems(self) -> list[str]:
        out = []
        if not self.solution.passed:
            out.append(f"solution fails its check ({why_failed(self.solution)})")
        if self.starter.passed:
            out.append("starter passes the check (the puzzle has nothing to fix)")
        return out


def why_failed(r: checker.CheckResult) -> str:
    if not r.correctness.ok:
        return f"incorrect: {r.correctness.message}"
    if r.speed and not r.speed.passed and "ratio" in (r.speed.statistic or ""):  # a memory metric
        return f"{r.speed.statistic} {r.speed.point:.2f} < bar {r.speed.bar:.2f}"
    if r.speed and not r.speed.passed:
        return f"speed-up CI low {r.speed.ci_low:.2f} < bar {r.speed.bar:.2f}"
    if r.evidence and not r.evidence.ok:
        return f"{r.evidence.planted} still found"
    return "passed"


def verify(puzzle: Puzzle, device: str, workdir: Path, seed: int | None = None) -> Verification:
    sol = checker.check(puzzle, puzzle.file("solution"), _mkdir(workdir / "check-solution"), device=device, seed=seed)
    starter = checker.check(puzzle, puzzle.file("starter"), _mkdir(workdir / "check-starter"), device=device,
                            seed=seed)
    return Verification(sol, starter)


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def measurements(v: Verification, profiled: dict[str, Any]) -> dict[str, Any]:
    """measurements.json: the interleaved slow/solution timings of the solution's check, and both checks."""
    sol = v.solution
    speed = sol.speed.to_dict() if sol.speed else {}
    return {
        "slow": sol.slow, "solution": sol.fixed,
        "speedup": {k: speed.get(k) for k in ("point", "ci_low", "ci_high", "bar", "n", "statistic", "confidence")},
        "check": {"solution": _check_summary(sol), "starter": _check_summary(v.starter)},
        "profiled": profiled,
    }


def _check_summary(r: checker.CheckResult) -> dict[str, Any]:
    d = r.to_dict()
    return {"passed": r.passed, "why": why_failed(r), "correctness": d["correctness"], "speed": d["speed"],
            "evidence": d["evidence"]}


def record(puzzle: Puzzle, dest: Path, device: str, workdir: Path, command: str, *, force: bool = False,
           seed: int | None = None) -> tuple[Verification, bool]:
    """Profile slow and solution, verify the checks, and write the artifacts into dest.

    Writes only when the solution passes and the starter fails, unless force. Returns (verification, written).
    """
    profiled: dict[str, Any] = {}
    snapshots = {}
    if puzzle.requirements.gpus > 1:  # N ranks: profiles and both checks in one torchrun launch
        from perflab.puzzles import distributed

        profiled, v = distributed.record_all(puzzle, workdir, device, seed)
    else:
        for variant in replay.RECORDED_VARIANTS:
            res = runner.run_variant(puzzle, puzzle.file(variant), variant, _mkdir(workdir / variant),
                                     device=device, command=command)
            profiled[variant] = {k: v for k, v in res.measurements[variant].items() if k != "samples_ms"}
        if "memory" in puzzle.tools:  # a memory snapshot per variant (puzzles/memory_evidence.py)
            from perflab.puzzles.memory_evidence import record_snapshots

            snapshots = record_snapshots(puzzle, _mkdir(workdir / "memory"), device)
            for variant, numbers in snapshots.items():
                profiled[variant]["memory"] = {k: v for k, v in numbers.items() if k != "path"}
        v = verify(puzzle, device, workdir, seed)
    if not (v.ok or force):
        return v, False
    ncu = _record_ncu(puzzle, workdir, device)
    tuned = _record_autotune(puzzle, workdir, device)
    sweep = _record_rank_sweep(puzzle, workdir, device, command)
    sweep += _record_extras(puzzle, workdir, device)
    sweep += _record_measured(puzzle, workdir, device)
    dest.mkdir(parents=True, exist_ok=True)
    for variant in replay.RECORDED_VARIANTS:
        _copy_trace(workdir / variant, dest, variant)
        if ncu:
            from perflab.puzzles import ncu_evidence

            ncu_evidence.copy_recording(workdir / variant, dest, variant)
        if tuned:
            from perflab.puzzles.autotune_log import log_file

            shutil.copyfile(log_file(workdir / variant, variant), log_file(dest, variant))
    for numbers in snapshots.values():
        shutil.copyfile(numbers["path"], dest / Path(numbers["path"]).name)
    for path in sweep:
        shutil.copyfile(path, dest / path.name)
    runner.write_json(dest / "measurements.json", measurements(v, profiled))
    runner.write_json(dest / "manifest.json", _manifest(puzzle, command, device))
    return v, True


def _manifest(puzzle: Puzzle, command: str, device: str) -> dict[str, Any]:
    if puzzle.requirements.gpus > 1:  # also the ranks, GPUs per node, NCCL version and settings
        from perflab.puzzles import distributed

        return distributed.environment(command, device, puzzle.requirements.gpus)
    return runner.environment(command, device)


def _copy_trace(src: Path, dest: Path, variant: str) -> None:
    """The variant's trace, or (multi-GPU puzzles) its folder of per-rank traces."""
    ranks = replay.ranks_dir(src, variant)
    if ranks.is_dir():
        target = replay.ranks_dir(dest, variant)
        if target.is_dir():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        for f in sorted(ranks.glob("rank*.trace.json.gz")):
            shutil.copyfile(f, target / f.name)
        return
    shutil.copyfile(replay.trace_file(src, variant), replay.trace_file(dest, variant))


def _record_rank_sweep(puzzle: Puzzle, workdir: Path, device: str, command: str) -> list[Path]:
    """Multi-GPU puzzles whose workload defines a batch sweep: sweep.json (+ sweep.png) at 1 and N ranks."""
    if puzzle.requirements.gpus <= 1:
        return []
    from perflab.puzzles import distributed

    path = distributed.record_sweep(puzzle, workdir, device, command)
    return [p for p in (path, path.with_suffix(".png")) if p.is_file()] if path else []


def _record_extras(puzzle: Puzzle, workdir: Path, device: str) -> list[Path]:
    """tools py-spy / profilers / diff: sampled profiles, the profiler-overhead table, the before trace."""
    from perflab.puzzles import extra_evidence

    return extra_evidence.record(puzzle, _mkdir(workdir / "extras"), device)


def _record_measured(puzzle: Puzzle, workdir: Path, device: str) -> list[Path]:
    """[timers]: <variant>.timers.json (parts timed three ways); tools nvml: <variant>.energy.json (NVML)."""
    from perflab.puzzles import energy_evidence, timers_evidence

    out = []
    for variant in replay.RECORDED_VARIANTS:
        if timers_evidence.uses_timers(puzzle):
            out.append(timers_evidence.record_variant(puzzle, puzzle.file(variant), _mkdir(workdir / "timers"),
                                                      variant, device=device))
        if energy_evidence.uses_energy(puzzle) and device.startswith("cuda"):
            out.append(energy_evidence.record_variant(puzzle, puzzle.file(variant), _mkdir(workdir / "energy"),
                                                      variant, device=device))
    return out


def _record_ncu(puzzle: Puzzle, workdir: Path, device: str) -> bool:
    """Kernel puzzles (tools = ["ncu"]): one profiled step of slow and of solution under Nsight Compute."""
    from perflab.puzzles import ncu_evidence

    if not ncu_evidence.uses_ncu(puzzle):
        return False
    checked = workdir / "check-solution"  # the solution's check profiled it already: reuse that report
    for variant in replay.RECORDED_VARIANTS:
        if variant == "solution" and ncu_evidence.has(checked, "mine"):
            ncu_evidence.copy_recording(checked, _mkdir(workdir / variant), "mine", variant)
        else:
            ncu_evidence.profile_variant(puzzle, puzzle.file(variant), workdir / variant, variant, device=device)
    return True


def _record_autotune(puzzle: Puzzle, workdir: Path, device: str) -> bool:
    """Puzzles with tools = ["autotune"]: the autotuner's choice per shape and every config's time there."""
    if "autotune" not in puzzle.tools:
        return False
    from perflab.puzzles.autotune_log import record_variant

    for variant in replay.RECORDED_VARIANTS:
        record_variant(puzzle, puzzle.file(variant), _mkdir(workdir / variant), variant, device=device)
    return True
