"""Memory evidence for puzzles with tools = ["memory"]: a snapshot per variant, and the memory check.

Recording (engine/recording.py, the `profile` hook): each recorded variant is built and stepped with the allocator's
history on (`torch.cuda.memory._record_memory_history`, Python stacks); the snapshot is dumped as the
pickle torch writes, then converted to `<variant>.memory.json.gz` (trace.snapshot.convert: the
restricted reader, never a plain unpickle). Peak memory numbers go into measurements.json.

The memory check ([check] metric = "peak_reserved_mb" or "reserved_mb"): after the usual correctness
stage, slow and fix are measured one after the other in a drained allocator (empty_cache) over
setup() plus MEMORY_STEPS steps, above what was reserved before: peak_reserved_mb is the peak of
reserved bytes, reserved_mb what stays reserved at the end (what a server holds after start-up;
model building's transient peak does not count). The fix passes when slow/fix >= [check] reduction and the memory doctor no longer reports the planted finding (high/medium) on the
fix's snapshot. Memory is deterministic for a given program, so the ratio is one measurement, not a
confidence interval (n = 1 in the result).
"""
from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

from perflab.puzzles.engine import checker, replay, runner, stats
from perflab.puzzles.engine.kinds import Checking, Kind, Recording, register

MEMORY_STEPS = 3
MAX_ENTRIES = 4000  # allocator history ring buffer: the last events are kept (small artifacts)
BLOCKING_SEVERITIES = ("high", "medium")
MB = 1024.0 * 1024.0


def snapshot_file(folder: Path, variant: str) -> Path:
    return Path(folder) / f"{variant}.memory.json.gz"


def _drain(torch: Any) -> None:
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def measure(module: Any, device: str, seed: int, *, steps: int = MEMORY_STEPS, snapshot_to: Path | None = None,
            max_entries: int = MAX_ENTRIES) -> dict[str, Any]:
    """Peak memory of setup() + `steps` steps of a workload module (MiB above the level before it)."""
    import torch

    _drain(torch)
    torch.cuda.reset_peak_memory_stats()
    base_reserved, base_allocated = torch.cuda.memory_reserved(), torch.cuda.memory_allocated()
    if snapshot_to is not None:
        torch.cuda.memory._record_memory_history(max_entries=max_entries, stacks="python")
    try:
        state = module.setup(device, seed)
        torch.cuda.synchronize()
        setup_peak_reserved, setup_peak_allocated = torch.cuda.max_memory_reserved(), torch.cuda.max_memory_allocated()
        after_setup = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        for _ in range(steps):
            module.step(state)
        torch.cuda.synchronize()
        out = {
            "peak_reserved_mb": round((max(setup_peak_reserved, torch.cuda.max_memory_reserved()) - base_reserved)
                                      / MB, 3),
            "peak_allocated_mb": round((max(setup_peak_allocated, torch.cuda.max_memory_allocated())
                                        - base_allocated) / MB, 3),
            "reserved_mb": round((torch.cuda.memory_reserved() - base_reserved) / MB, 3),
            "allocated_mb": round((torch.cuda.memory_allocated() - base_allocated) / MB, 3),
            "after_setup_allocated_mb": round((after_setup - base_allocated) / MB, 3),
            # what the steps need on top of what setup left allocated (temporaries of a step)
            "step_extra_allocated_mb": round((torch.cuda.max_memory_allocated() - after_setup) / MB, 3),
            "steps": steps,
        }
        if snapshot_to is not None:
            pickle_path = Path(snapshot_to).with_suffix("").with_suffix(".pickle")
            torch.cuda.memory._dump_snapshot(str(pickle_path))
            from perflab.trace.snapshot import convert

            convert(pickle_path, snapshot_to)
            pickle_path.unlink()
            out["snapshot"] = Path(snapshot_to).name
    finally:
        if snapshot_to is not None:
            torch.cuda.memory._record_memory_history(enabled=None)
    del state
    _drain(torch)
    return out


def record_snapshots(puzzle: Any, workdir: Path, device: str, seed: int = 0) -> dict[str, dict[str, Any]]:
    """One snapshot and peak-memory measurement per recorded variant, written into workdir."""
    out = {}
    for variant in replay.RECORDED_VARIANTS:
        module = runner.load_module(puzzle.file(variant))
        out[variant] = measure(module, device, seed, snapshot_to=snapshot_file(workdir, variant))
        out[variant]["path"] = str(snapshot_file(workdir, variant))
    return out


def check_memory(puzzle: Any, ref: Any, fix: Any, result: Any, out_dir: Path, *, device: str, seed: int) -> Any:
    """The memory stages of the checker: peak reserved slow vs fix, then the memory doctor on the fix."""
    try:
        slow = measure(ref, device, seed)
        mine = measure(fix, device, seed, snapshot_to=snapshot_file(out_dir, "mine"))
    except Exception as exc:  # the learner's code: one line
        result.correctness = checker.Correctness(False, seed, f"crashed while measuring memory: "
                                                               f"{type(exc).__name__}: {exc}")
        return result
    result.slow, result.fixed = slow, mine
    metric = puzzle.check.metric
    ratio = slow[metric] / mine[metric] if mine[metric] > 0 else float("inf")
    bar = puzzle.check.reduction
    result.speed = stats.SpeedupResult(point=ratio, ci_low=ratio, ci_high=ratio, bar=bar, passed=ratio >= bar, n=1,
                                       statistic=f"{metric} ratio (slow / fix)", confidence=1.0)
    result.evidence = planted_memory_evidence(puzzle, snapshot_file(out_dir, "mine"))
    return result


def planted_memory_evidence(puzzle: Any, snapshot: Path) -> Any:
    from perflab.doctor.memory import diagnose_memory

    report = diagnose_memory(snapshot)
    found = [f"{f.id} ({f.severity})" for f in report.findings]
    still = [f for f in report.findings if f.id == puzzle.check.planted and f.severity in BLOCKING_SEVERITIES]
    return checker.Evidence(ok=not still, planted=puzzle.check.planted, found=found, trace=str(snapshot))


MEMORY_METRICS = ("peak_reserved_mb", "reserved_mb")


@register
class Memory(Kind):
    name = "memory"

    def applies(self, puzzle: Any) -> bool:
        return "memory" in puzzle.tools or puzzle.check.metric in MEMORY_METRICS

    def profile(self, rec: Recording) -> list[Path]:
        if "memory" not in rec.puzzle.tools:
            return []
        snapshots = record_snapshots(rec.puzzle, rec.folder("memory"), rec.device)
        for variant, numbers in snapshots.items():
            rec.profiled[variant]["memory"] = {k: v for k, v in numbers.items() if k != "path"}
        return [Path(numbers["path"]) for numbers in snapshots.values()]

    def measure(self, chk: Checking) -> Any:
        if chk.puzzle.check.metric not in MEMORY_METRICS:
            return None
        chk.ref_state = chk.fix_state = None  # measured one at a time in a drained allocator
        chk.phase("memory")
        return check_memory(chk.puzzle, chk.ref, chk.fix, chk.result, chk.out_dir, device=chk.device, seed=chk.seed)

    def replay(self, ev: Any, variant: str = "slow") -> Path:
        return snapshot_file(ev.folder, variant)
