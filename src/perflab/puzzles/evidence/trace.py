"""The torch.profiler trace: every puzzle's evidence, and the default of each hook.

- record: one process profiles the variant (`setup`, warm-up, `[profile] steps` ProfilerStep#N steps) into
  `<variant>.trace.json.gz`, then times as many unprofiled steps (measurements.json);
- check: slow and fix timed interleaved (the bootstrap interval of the speed-up against the bar), then the
  fix re-profiled: the doctor's report must no longer hold the planted finding (checker.planted_standing;
  two profiles of three decide when the first still shows it);
- replay: the recorded trace (replay.Evidence: its summary and the doctor's report).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from perflab.errors import PerflabError
from perflab.puzzles.engine import checker, guard, replay, runner, stats
from perflab.puzzles.engine.kinds import Checking, Kind, register
from perflab.puzzles.engine.spec import Puzzle, display_path


def run_variant(puzzle: Puzzle, source: Path, variant: str, out_dir: Path, *, device: str, command: str,
                steps: int | None = None, seed: int = 0, on_step: runner.OnStep | None = None) -> runner.RunResult:
    """Profile one variant and write manifest.json, <variant>.trace.json.gz, measurements.json into out_dir."""
    module = runner.load_module(source)
    n = steps or puzzle.profile.steps
    trace = replay.trace_file(out_dir, variant)
    try:
        state = module.setup(device, seed)
        runner.profile_steps(module, state, device, trace, warmup=puzzle.profile.warmup, steps=n,
                             with_stack=puzzle.profile.with_stack, on_step=on_step,
                             profile_memory=puzzle.profile.profile_memory)
        sample = runner.sampler(module.step, state, device)
        measurements = {variant: stats.summary([sample() for _ in range(n)])}
    except PerflabError:
        raise
    except Exception as exc:  # most often the learner's fix: one line, not a traceback
        raise PerflabError(f"{display_path(source)} failed while running: {type(exc).__name__}: {exc}") from None
    manifest = runner.environment(command, device)
    runner.write_json(out_dir / "manifest.json", manifest)
    runner.write_json(out_dir / "measurements.json", measurements)
    return runner.RunResult(out_dir, trace, device, manifest, measurements)


def planted_evidence(puzzle: Puzzle, trace: Path) -> checker.Evidence:
    """The doctor on the fix's trace: the planted finding must no longer stand (checker.planted_standing)."""
    report = replay.diagnose(replay.load_trace(trace))
    found = [f"{f.id} ({f.severity})" for f in report.findings]
    still = checker.planted_standing(report.findings, puzzle.check.planted)
    return checker.Evidence(ok=not still, planted=puzzle.check.planted, found=found, trace=str(trace),
                            residue=not still and checker.planted_medium(report.findings, puzzle.check.planted))


class _StepCrashed(Exception):
    """The fix's step() raised while it was profiled (its cause is the learner's exception)."""


def profiled_evidence(puzzle: Puzzle, profile: Callable[[str], Path]) -> checker.Evidence:
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
    return checker.Evidence(ok=still < 2, planted=first.planted, trace=first.trace,
                            found=first.found + [f"{first.planted} blocking in {still} of {len(seen)} profiles"])


def fix_profiler(chk: Checking) -> Callable[[str], Path]:
    """`profile(name)`: one torch.profiler trace of the fix's steps in the check's folder (its step crashing:
    _StepCrashed, the learner's exception as its cause)."""
    def profile(name: str) -> Path:
        trace = replay.trace_file(chk.out_dir, name)
        try:
            runner.profile_steps(chk.fix, chk.fix_state, chk.device, trace, warmup=1, steps=chk.puzzle.profile.steps,
                                 with_stack=chk.puzzle.profile.with_stack)
        except PerflabError:
            raise
        except Exception as exc:  # the learner's code; the doctor's own errors must not read as theirs
            raise _StepCrashed from exc
        return trace
    return profile


def reprofiled(chk: Checking) -> None:
    """The evidence stage: the doctor on profiles of the fix (profiled_evidence) into chk.result; a fix whose step
    crashes under the profiler fails the check, said in one line."""
    chk.phase("profiling")
    try:
        chk.result.evidence = profiled_evidence(chk.puzzle, fix_profiler(chk))
    except _StepCrashed as crash:
        exc = crash.__cause__
        chk.result.correctness = checker.Correctness(False, chk.seed,
                                                     f"crashed while re-profiling: {type(exc).__name__}: {exc}")


def timed_and_profiled(chk: Checking) -> checker.CheckResult:
    """The fix check's speed and evidence stages for a time metric."""
    puzzle, result = chk.puzzle, chk.result
    try:
        chk.phase("timing")
        timed = guard.time_guarded(chk.ref, chk.ref_state, chk.fix, chk.fix_state, chk.device, chk.reps, puzzle,
                                   chk.seed)
        slow, fast = timed.slow, timed.fast
        result.slow, result.fixed = stats.summary(slow), stats.summary(fast)
        result.speed = stats.speedup_verdict(slow, fast, puzzle.check.speedup)
        refused = timed.mismatch or guard.refusal(chk, fast)
        if refused:
            result.correctness = checker.Correctness(False, chk.seed, refused)
            return result
    except PerflabError:
        raise
    except Exception as exc:  # the fix crashed on a later step: a failed check, said in one line
        if result.speed is not None:
            raise  # not the fix's step: a bug of ours, with its traceback
        result.correctness = checker.Correctness(False, chk.seed, f"crashed while timing: {type(exc).__name__}: {exc}")
        return result
    reprofiled(chk)
    return result


@register
class Trace(Kind):
    name = "trace"
    priority = -100   # the default: every other kind's answer comes first

    def applies(self, puzzle: Any) -> bool:
        return True

    def run(self, puzzle: Any, source: Path, variant: str, out_dir: Path, *, device: str, command: str,
            steps: int | None, seed: int, on_step: Any) -> runner.RunResult:
        return run_variant(puzzle, source, variant, out_dir, device=device, command=command, steps=steps,
                           seed=seed, on_step=on_step)

    def measure(self, chk: Checking) -> checker.CheckResult | None:
        return timed_and_profiled(chk) if chk.puzzle.check.metric == "time" else None

    def replay(self, ev: Any, variant: str = "slow") -> Any:
        return ev.trace(variant)
