"""Recording a puzzle's artifacts and verifying its fix check (`scripts/record.py puzzle`, `catalog-check`).

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

from perflab.puzzles.engine import checker, kinds, replay, runner, stats
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
    The puzzle's evidence kinds (engine/kinds.py) may profile and check in one go (`verify`), add to the
    profiles (`profile`), and record what they ship once the checks pass (`record`). Returns (verification, written).
    """
    rec = kinds.Recording(puzzle, workdir, device, command, seed)
    ship: list[Path] = []
    v = kinds.first(puzzle, "verify", rec)
    if v is None:
        for variant in replay.recorded_variants(puzzle):
            res = runner.run_variant(puzzle, puzzle.file(variant), variant, rec.folder(variant), device=device,
                                     command=command)
            rec.profiled[variant] = {k: x for k, x in res.measurements[variant].items() if k != "samples_ms"}
        ship += kinds.every(puzzle, "profile", rec)
        v = verify(puzzle, device, workdir, seed)
        v.stages = measure_stages(puzzle, device, seed)
    if not (v.ok or force):
        return v, False
    ship += kinds.every(puzzle, "record", rec)
    dest.mkdir(parents=True, exist_ok=True)
    for variant in replay.recorded_variants(puzzle):
        _copy_trace(workdir / variant, dest, variant)
    for path in ship:  # a file, or a folder a tool writes whole (an investigation)
        if Path(path).is_dir():
            shutil.copytree(path, dest / path.name, dirs_exist_ok=True)
        else:
            shutil.copyfile(path, dest / path.name)
    runner.write_json(dest / "measurements.json", measurements(v, rec.profiled))
    manifest = kinds.first(puzzle, "manifest", puzzle, command, device) or runner.environment(command, device)
    runner.write_json(dest / "manifest.json", manifest)
    return v, True


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
