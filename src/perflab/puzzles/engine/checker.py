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
from perflab.puzzles.engine import replay, runner, stats
from perflab.puzzles.engine.spec import Puzzle

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


def time_pair(ref: Any, ref_state: Any, fix: Any, fix_state: Any, device: str,
              reps: int) -> tuple[list[float], list[float]]:
    """Interleaved timings in ms per step; each side repeats its step enough to last about SAMPLE_TARGET_MS."""
    def calibrated(module: Any, state: Any) -> stats.Sample:
        probe = runner.sampler(module.step, state, device)
        for _ in range(TIMING_WARMUP):
            probe()
        step_ms = statistics.median(probe() for _ in range(3))
        return runner.sampler(module.step, state, device, stats.inner_repeats(step_ms, SAMPLE_TARGET_MS))

    return stats.time_interleaved(calibrated(ref, ref_state), calibrated(fix, fix_state), reps, warmup=1)


def planted_standing(findings: list, planted: str) -> list:
    """The planted finding where it still holds the step in one trace's ranked findings: high, or medium and
    ranked first. Medium behind another blocking finding is a residue the fix left behind a new bottleneck
    (a ~1 ms step after the fix, where a busy host's pauses alone make ~10 % of host gaps); the fix moved
    the bottleneck, which is its job. Counters (ncu, memory snapshots) do not vary so: their checks stay
    strict (ncu_evidence, memory_evidence)."""
    return [f for i, f in enumerate(findings)
            if f.id == planted and (f.severity == "high" or (f.severity == "medium" and i == 0))]


def planted_medium(findings: list, planted: str) -> bool:
    """The planted finding is there as medium: with nothing standing, a residue behind a new bottleneck."""
    return any(f.id == planted and f.severity == "medium" for f in findings)


def planted_evidence(puzzle: Puzzle, trace: Path) -> Evidence:
    """The doctor on the fix's trace: the planted finding must no longer stand (planted_standing)."""
    report = replay.diagnose(replay.load_trace(trace))
    found = [f"{f.id} ({f.severity})" for f in report.findings]
    still = planted_standing(report.findings, puzzle.check.planted)
    return Evidence(ok=not still, planted=puzzle.check.planted, found=found, trace=str(trace),
                    residue=not still and planted_medium(report.findings, puzzle.check.planted))


class _StepCrashed(Exception):
    """The fix's step() raised while it was profiled (its cause is the learner's exception)."""


def profiled_evidence(puzzle: Puzzle, profile: Callable[[str], Path]) -> Evidence:
    """The doctor on a profile of the fix (`profile(name)` records one and returns its trace). When the
    planted finding still shows, two more profiles are taken and two of the three decide: a 1 ms step is
    short enough for one stray host pause (a thread descheduled for 3 ms inside an aten::add) to decide
    one profile, never all of them."""
    first = planted_evidence(puzzle, profile("mine"))
    if first.ok:
        return first
    seen = [first, planted_evidence(puzzle, profile("mine.2"))]
    if seen[1].ok:
        seen.append(planted_evidence(puzzle, profile("mine.3")))
    still = sum(not e.ok for e in seen)
    return Evidence(ok=still < 2, planted=first.planted, trace=first.trace,
                    found=first.found + [f"{first.planted} blocking in {still} of {len(seen)} profiles"])


def check(puzzle: Puzzle, fix_path: Path, out_dir: Path, *, device: str, seed: int | None = None,
          reps: int | None = None, on_phase: OnPhase | None = None) -> CheckResult:
    """Run the three stages in order; later stages run only when correctness holds."""
    def phase(name: str) -> None:
        if on_phase:
            on_phase(name)

    seed = secrets.randbelow(2**31 - 1) if seed is None else seed
    if puzzle.requirements.gpus > 1:  # the same stages on N ranks under torchrun (puzzles/distributed.py)
        from perflab.puzzles.evidence import multirank as distributed

        return distributed.check(puzzle, fix_path, out_dir, device=device, seed=seed, reps=reps, on_phase=on_phase)
    ref = runner.load_module(puzzle.file("slow"))
    fix = runner.load_module(fix_path)
    phase("correctness")
    ref_state = ref.setup(device, seed)
    try:
        fix_state = fix.setup(device, seed)
    except Exception as exc:
        return CheckResult(puzzle.id, str(fix_path), device,
                           Correctness(False, seed, f"setup() raised {type(exc).__name__}: {exc}"))
    result = CheckResult(puzzle.id, str(fix_path), device,
                         check_correctness(ref, ref_state, fix, fix_state, device, seed, puzzle))
    if not result.correctness.ok:
        return result
    if puzzle.check.metric == "overhead":  # a profiler's cost over bare_step (puzzles/overhead.py)
        from perflab.puzzles.evidence.overhead import check_overhead

        phase("overhead")
        return check_overhead(puzzle, ref, ref_state, fix, fix_state, result, device=device,
                              reps=reps or puzzle.check.reps)
    if puzzle.check.metric != "time":  # a memory puzzle: memory, not time (puzzles/memory_evidence.py)
        from perflab.puzzles.evidence.memory import check_memory

        del ref_state, fix_state  # measured one at a time in a drained allocator
        phase("memory")
        return check_memory(puzzle, ref, fix, result, out_dir, device=device, seed=seed)
    def profile(name: str) -> Path:
        trace = replay.trace_file(out_dir, name)
        try:
            runner.profile_steps(fix, fix_state, device, trace, warmup=1, steps=puzzle.profile.steps,
                                 with_stack=puzzle.profile.with_stack)
        except PerflabError:
            raise
        except Exception as exc:  # the learner's code; the doctor's own errors must not read as theirs
            raise _StepCrashed from exc
        return trace

    try:
        phase("timing")
        slow, fast = time_pair(ref, ref_state, fix, fix_state, device, reps or puzzle.check.reps)
        result.slow, result.fixed = stats.summary(slow), stats.summary(fast)
        result.speed = stats.speedup_verdict(slow, fast, puzzle.check.speedup)
        phase("profiling")
        result.evidence = profiled_evidence(puzzle, profile)
    except PerflabError:
        raise
    except Exception as exc:  # the fix crashed on a later step: a failed check, said in one line
        if isinstance(exc, _StepCrashed):
            stage, exc = "re-profiling", exc.__cause__
        elif result.speed is None:
            stage = "timing"
        else:
            raise  # not the fix's step: a bug of ours, with its traceback
        result.correctness = Correctness(False, seed, f"crashed while {stage}: {type(exc).__name__}: {exc}")
        return result
    if "ncu" in puzzle.tools and result.speed.passed:  # kernel puzzles: the planted finding is an ncu one
        from perflab.puzzles.evidence import ncu as ncu_evidence

        phase("ncu")
        result.evidence = ncu_evidence.planted_evidence(puzzle, fix_path, out_dir, device=device, seed=seed)
    return result
