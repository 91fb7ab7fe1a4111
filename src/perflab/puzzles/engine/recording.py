"""Recording a puzzle's artifacts and verifying its fix check (scripts/record_artifacts.py, check_catalog_gpu.py).

`verify` checks the shipped solution (must pass) and the starter (must fail); `record` profiles slow,
solution and the puzzle's `stages` (intermediate fixes: each must match slow's outputs and is timed
against it) and writes the artifacts folder that replay reads.
"""
from __future__ import annotations

import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perflab.puzzles.engine import checker, replay, runner, stats
from perflab.puzzles.engine.spec import Puzzle


@dataclass
class Verification:
    solution: checker.CheckResult
    starter: checker.CheckResult
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)   # measure_stages: per stage, vs slow

    @property
    def ok(self) -> bool:
        return self.solution.passed and not self.starter.passed and all(s["correct"] for s in self.stages.values())

    def problems(self) -> list[str]:
        out = []
        if not self.solution.passed:
            out.append(f"solution fails its check ({why_failed(self.solution)})")
        if self.starter.passed:
            out.append("starter passes the check (the puzzle has nothing to fix)")
        out += [f"{name} is incorrect ({s['why']})" for name, s in self.stages.items() if not s["correct"]]
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
    """measurements.json: the interleaved slow/solution timings of the solution's check, and both checks
    (and, with `stages`, each stage's interleaved timings against slow)."""
    sol = v.solution
    speed = sol.speed.to_dict() if sol.speed else {}
    out = {
        "slow": sol.slow, "solution": sol.fixed,
        "speedup": {k: speed.get(k) for k in ("point", "ci_low", "ci_high", "bar", "n", "statistic", "confidence")},
        "check": {"solution": _check_summary(sol), "starter": _check_summary(v.starter)},
        "profiled": profiled,
    }
    if v.stages:
        out["stages"] = v.stages
    return out


def measure_stages(puzzle: Puzzle, device: str, seed: int | None = None) -> dict[str, dict[str, Any]]:
    """Each stage as the fix check sees a fix: the same outputs as slow on one seed, then slow and the stage
    timed interleaved (checker.time_pair): {stage: {median_ms, ..., speedup_vs_slow, ci_low, ci_high, correct}}."""
    if not puzzle.stages:
        return {}
    seed = secrets.randbelow(2**31 - 1) if seed is None else seed
    ref = runner.load_module(puzzle.file("slow"))
    ref_state = ref.setup(device, seed)
    out: dict[str, dict[str, Any]] = {}
    for stage in puzzle.stages:
        module = runner.load_module(puzzle.file(stage))
        state = module.setup(device, seed)
        correct = checker.check_correctness(ref, ref_state, module, state, device, seed, puzzle)
        slow, fast = checker.time_pair(ref, ref_state, module, state, device, puzzle.check.reps)
        speed = stats.speedup_verdict(slow, fast, 1.0)
        out[stage] = {**stats.summary(fast), "slow_median_ms": stats.summary(slow)["median_ms"],
                      "speedup_vs_slow": speed.point, "ci_low": speed.ci_low, "ci_high": speed.ci_high,
                      "correct": correct.ok, "why": correct.message or "same outputs as slow", "seed": seed}
        del state
    return out


def _check_summary(r: checker.CheckResult) -> dict[str, Any]:
    d = r.to_dict()
    return {"passed": r.passed, "why": why_failed(r), "correctness": d["correctness"], "speed": d["speed"],
            "evidence": d["evidence"]}


def record(puzzle: Puzzle, dest: Path, device: str, workdir: Path, command: str, *, force: bool = False,
           seed: int | None = None) -> tuple[Verification, bool]:
    """Profile slow and solution, verify the checks, and write the artifacts into dest.

    Writes only when the solution passes, the starter fails and every stage is correct, unless force.
    Returns (verification, written).
    """
    profiled: dict[str, Any] = {}
    snapshots = {}
    if puzzle.requirements.gpus > 1:  # N ranks: profiles and both checks in one torchrun launch
        from perflab.puzzles.evidence import multirank as distributed

        profiled, v = distributed.record_all(puzzle, workdir, device, seed)
    else:
        for variant in replay.recorded_variants(puzzle):
            res = runner.run_variant(puzzle, puzzle.file(variant), variant, _mkdir(workdir / variant),
                                     device=device, command=command)
            profiled[variant] = {k: v for k, v in res.measurements[variant].items() if k != "samples_ms"}
        if "memory" in puzzle.tools:  # a memory snapshot per variant (puzzles/memory_evidence.py)
            from perflab.puzzles.evidence.memory import record_snapshots

            snapshots = record_snapshots(puzzle, _mkdir(workdir / "memory"), device)
            for variant, numbers in snapshots.items():
                profiled[variant]["memory"] = {k: v for k, v in numbers.items() if k != "path"}
        v = verify(puzzle, device, workdir, seed)
        v.stages = measure_stages(puzzle, device, seed)
    if not (v.ok or force):
        return v, False
    ncu = _record_ncu(puzzle, workdir, device)
    tuned = _record_autotune(puzzle, workdir, device)
    sweep = _record_rank_sweep(puzzle, workdir, device, command)
    sweep += _record_extras(puzzle, workdir, device)
    sweep += _record_measured(puzzle, workdir, device)
    dest.mkdir(parents=True, exist_ok=True)
    for variant in replay.recorded_variants(puzzle):
        _copy_trace(workdir / variant, dest, variant)
        if ncu:
            from perflab.puzzles.evidence import ncu as ncu_evidence

            ncu_evidence.copy_recording(workdir / variant, dest, variant)
        if tuned and variant in replay.RECORDED_VARIANTS:
            from perflab.puzzles.evidence.autotune import log_file

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
        from perflab.puzzles.evidence import multirank as distributed

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
    from perflab.puzzles.evidence import multirank as distributed

    path = distributed.record_sweep(puzzle, workdir, device, command)
    return [p for p in (path, path.with_suffix(".png")) if p.is_file()] if path else []


def _record_extras(puzzle: Puzzle, workdir: Path, device: str) -> list[Path]:
    """tools py-spy / profilers / diff: sampled profiles, the profiler-overhead table, the before trace."""
    from perflab.puzzles.evidence import sampling as extra_evidence

    return extra_evidence.record(puzzle, _mkdir(workdir / "extras"), device)


def _record_measured(puzzle: Puzzle, workdir: Path, device: str) -> list[Path]:
    """[timers]: <variant>.timers.json (parts timed three ways); tools nvml: <variant>.energy.json (NVML)."""
    from perflab.puzzles.evidence import energy as energy_evidence, timers as timers_evidence

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
    """Kernel puzzles (tools = ["ncu"]): one profiled step of slow, solution (and each stage) under Nsight Compute."""
    from perflab.puzzles.evidence import ncu as ncu_evidence

    if not ncu_evidence.uses_ncu(puzzle):
        return False
    checked = workdir / "check-solution"  # the solution's check profiled it already: reuse that report
    for variant in replay.recorded_variants(puzzle):
        if variant == "solution" and ncu_evidence.has(checked, "mine"):
            ncu_evidence.copy_recording(checked, _mkdir(workdir / variant), "mine", variant)
        else:
            ncu_evidence.profile_variant(puzzle, puzzle.file(variant), workdir / variant, variant, device=device)
    return True


def _record_autotune(puzzle: Puzzle, workdir: Path, device: str) -> bool:
    """Puzzles with tools = ["autotune"]: the autotuner's choice per shape and every config's time there."""
    if "autotune" not in puzzle.tools:
        return False
    from perflab.puzzles.evidence.autotune import record_variant

    for variant in replay.RECORDED_VARIANTS:
        record_variant(puzzle, puzzle.file(variant), _mkdir(workdir / variant), variant, device=device)
    return True
