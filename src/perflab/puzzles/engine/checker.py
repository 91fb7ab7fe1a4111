"""The fix checker: correct on fresh inputs, measurably faster, and the planted finding gone.

1. correctness: fix and reference built with `setup(device, seed)` from the same fresh random seed;
   an `out` tensor in the state is poisoned with NaN before each checked step; outputs compared at
   dtype-appropriate tolerance (puzzle.toml [check] rtol/atol override);
2. speed: slow and fix timed interleaved after warm-up (CUDA events, or perf_counter on the CPU);
   pass when the lower bound of the bootstrap 95 % interval of the speed-up clears the bar;
3. evidence: the fix is re-profiled and the doctor must no longer hold the planted finding (`planted_standing`).
"""
from __future__ import annotations

import secrets
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from perflab.errors import PerflabError
from perflab.puzzles.engine import kinds, runner, stats
from perflab.puzzles.engine.spec import Puzzle
from perflab.toolkit.compile_watch import warm_until_steady, watching

# (rtol, atol) for outputs of "the same math through different kernels" (reordered reductions, fusion).
DTYPE_TOLERANCES = {
    "float64": (1e-7, 1e-7),
    "float32": (1e-4, 1e-5),
    "float16": (1e-2, 1e-3),
    "bfloat16": (2e-2, 1e-2),
}
EXACT = (0.0, 0.0)
CHECKED_STEPS = 2
TIMING_WARMUP = 3
SAMPLE_TARGET_MS = 2.0

OnPhase = Callable[[str], None]


@dataclass
class Correctness:
    ok: bool
    seed: int
    message: str = ""


@dataclass
class Evidence:
    ok: bool
    planted: str
    found: list[str] = field(default_factory=list)   # "id (severity)" of every finding
    trace: str = ""
    what: str = ""   # when the evidence is not the doctor's verdict on the planted finding: what it checks
    residue: bool = False   # ok, with the planted finding still medium behind a new bottleneck (planted_standing)


@dataclass
class CheckResult:
    puzzle: str
    fix: str
    device: str
    correctness: Correctness
    speed: stats.SpeedupResult | None = None
    slow: dict[str, Any] = field(default_factory=dict)     # stats.summary of the slow timings
    fixed: dict[str, Any] = field(default_factory=dict)
    evidence: Evidence | None = None

    @property
    def passed(self) -> bool:
        return bool(self.correctness.ok and self.speed and self.speed.passed and self.evidence and self.evidence.ok)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["speed"] = self.speed.to_dict() if self.speed else None
        d["passed"] = self.passed
        return d


def tolerance(dtype_name: str, puzzle: Puzzle) -> tuple[float, float]:
    """The puzzle's rtol/atol where given, else the dtype default; integers and bools compare exactly."""
    rtol, atol = DTYPE_TOLERANCES.get(dtype_name, EXACT)
    return (puzzle.check.rtol if puzzle.check.rtol is not None else rtol,
            puzzle.check.atol if puzzle.check.atol is not None else atol)


def flatten(out: Any, path: str = "out") -> list[tuple[str, Any]]:
    """Outputs as (path, leaf) pairs: tensors, numbers, nested in tuples/lists/dicts."""
    if isinstance(out, (list, tuple)):
        return [leaf for i, v in enumerate(out) for leaf in flatten(v, f"{path}[{i}]")]
    if isinstance(out, dict):
        return [leaf for k in sorted(out) for leaf in flatten(out[k], f"{path}[{k!r}]")]
    return [(path, out)]


def snapshot(out: Any) -> list[tuple[str, Any]]:
    """Detached copies, so a later step that reuses the buffers cannot change what we compare."""
    import torch

    return [(p, v.detach().clone() if isinstance(v, torch.Tensor) else v) for p, v in flatten(out)]


def compare(ref: list[tuple[str, Any]], got: list[tuple[str, Any]], puzzle: Puzzle) -> str:
    """'' when the fix's outputs match the reference's, else one line saying where and how they differ."""
    import torch

    if [p for p, _ in ref] != [p for p, _ in got]:
        return f"output structure differs: expected {[p for p, _ in ref]}, got {[p for p, _ in got]}"
    for (path, r), (_, g) in zip(ref, got):
        if isinstance(r, torch.Tensor):
            rtol, atol = tolerance(str(r.dtype).removeprefix("torch."), puzzle)
            try:
                torch.testing.assert_close(g, r, rtol=rtol, atol=atol, equal_nan=True, check_device=False)
            except (AssertionError, TypeError, ValueError) as exc:
                detail = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
                return f"{path}: {detail[:300]} (rtol={rtol:g}, atol={atol:g})"
        elif r != g:
            return f"{path}: expected {r!r}, got {g!r}"
    return ""


def poison(state: Any) -> None:
    import torch

    out = state.get("out") if isinstance(state, dict) else None
    if isinstance(out, torch.Tensor) and out.is_floating_point():
        out.fill_(float("nan"))


def checked_outputs(module: Any, state: Any, device: str) -> list[list[tuple[str, Any]]]:
    results = []
    for _ in range(CHECKED_STEPS):
        poison(state)
        results.append(snapshot(module.step(state)))
        runner.synchronize(device)
    return results


def check_correctness(ref: Any, ref_state: Any, fix: Any, fix_state: Any, device: str, seed: int,
                      puzzle: Puzzle) -> Correctness:
    expected = checked_outputs(ref, ref_state, device)
    try:
        got = checked_outputs(fix, fix_state, device)
    except Exception as exc:  # the learner's code: a crash is a failed check, in one line
        return Correctness(False, seed, f"step() raised {type(exc).__name__}: {exc}")
    for i, (e, g) in enumerate(zip(expected, got)):
        message = compare(e, g, puzzle)
        if message:
            return Correctness(False, seed, f"checked step {i + 1}: {message}")
    return Correctness(True, seed)


def calibrated(step: Callable[[Any], Any], state: Any, device: str) -> stats.Sample:
    """A sampler of `step` warmed up (compile work done) that repeats it enough to last about SAMPLE_TARGET_MS."""
    probe = runner.sampler(step, state, device)
    with watching(runner._torch()) as watch:  # a torch.compile'd fix: no compile work in the timed steps
        for _ in range(TIMING_WARMUP):
            probe()
        warm_until_steady(probe, watch)
    step_ms = statistics.median(probe() for _ in range(3))
    return runner.sampler(step, state, device, stats.inner_repeats(step_ms, SAMPLE_TARGET_MS))


def time_pair(ref: Any, ref_state: Any, fix: Any, fix_state: Any, device: str,
              reps: int) -> tuple[list[float], list[float]]:
    """Interleaved timings in ms per step; each side repeats its step enough to last about SAMPLE_TARGET_MS."""
    return stats.time_interleaved(calibrated(ref.step, ref_state, device), calibrated(fix.step, fix_state, device),
                                  reps, warmup=1)


def planted_standing(findings: list, planted: str) -> list:
    """The planted finding where it still holds the step in one trace's ranked findings: high, or medium and
    ranked first. Medium behind another blocking finding is a residue the fix left behind a new bottleneck
    (a ~1 ms step after the fix, where a busy host's pauses alone make ~10 % of host gaps); the fix moved
    the bottleneck, which is its job. Counters (ncu, memory snapshots) do not vary so: their checks stay
    strict (evidence/ncu.py, evidence/memory.py)."""
    return [f for i, f in enumerate(findings)
            if f.id == planted and (f.severity == "high" or (f.severity == "medium" and i == 0))]


def planted_medium(findings: list, planted: str) -> bool:
    """The planted finding is there as medium: with nothing standing, a residue behind a new bottleneck."""
    return any(f.id == planted and f.severity == "medium" for f in findings)


def check(puzzle: Puzzle, fix_path: Path, out_dir: Path, *, device: str, seed: int | None = None,
          reps: int | None = None, on_phase: OnPhase | None = None) -> CheckResult:
    """Run the stages in order; later stages run only when correctness holds. The puzzle's evidence kinds
    judge the fix (engine/kinds.py): one may run the whole check (`check`), the first to answer `measure`
    times or measures it and re-profiles it, and one may `confirm` a fix fast enough with other evidence."""
    seed = secrets.randbelow(2**31 - 1) if seed is None else seed
    chk = kinds.Checking(puzzle, Path(fix_path), out_dir, device, seed, reps or puzzle.check.reps,
                         on_phase or (lambda _name: None))
    whole = kinds.first(puzzle, "check", chk)
    if whole is not None:
        return whole
    chk.ref, chk.fix = runner.load_module(puzzle.file("slow")), runner.load_module(fix_path)
    chk.phase("correctness")
    chk.ref_state = chk.ref.setup(device, seed)
    try:
        chk.fix_state = chk.fix.setup(device, seed)
    except Exception as exc:
        return CheckResult(puzzle.id, str(fix_path), device,
                           Correctness(False, seed, f"setup() raised {type(exc).__name__}: {exc}"))
    chk.result = CheckResult(puzzle.id, str(fix_path), device,
                             check_correctness(chk.ref, chk.ref_state, chk.fix, chk.fix_state, device, seed, puzzle))
    if not chk.result.correctness.ok:
        return chk.result
    result = kinds.first(puzzle, "measure", chk)
    if result is None:
        raise PerflabError(f"{puzzle.id}: no evidence kind measures [check] metric {puzzle.check.metric!r}")
    if result.correctness.ok and result.speed is not None and result.speed.passed:
        result.evidence = kinds.first(puzzle, "confirm", chk) or result.evidence
    return result
