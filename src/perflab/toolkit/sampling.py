"""In-process sampling profilers of Python code, and a deterministic one for comparison.

`Sampler` is the idea behind Scalene's CPU profiler in a few lines: an interval timer
(`signal.setitimer`) delivers a signal every `interval_s`; the handler runs in the main thread
between two bytecodes and counts the innermost Python frame it interrupted. clock="wall"
(ITIMER_REAL, SIGALRM) samples elapsed time, as py-spy does; clock="cpu" (ITIMER_PROF, SIGPROF)
samples the process's CPU time, all threads together, as Scalene does. Between samples the program
runs untouched, so the cost is one short handler call per sample (a few µs): about `rate x handler
cost` of the run, well under 1 % at a few hundred Hz. Time spent inside a C call (a torch op,
`torch.tensor(list)`) is charged to the Python function that made the call, as py-spy does without
`--native`.

`TracingProfile` wraps cProfile (a hook on every call and return of every Python and C function):
exact call counts, but every call pays, and the per-call cost is charged to the code it measures.

Both answer the same question: `hottest()` -> "file.py:function" with the most own time, counting
only Python source functions, with the time of the C functions (builtins) a function calls
directly counted as its own (cProfile keeps them apart; `own_times` adds them back, so both
profilers charge time alike). POSIX only for `Sampler` (signals); start and stop it in the main
thread.
"""
from __future__ import annotations

import os
import signal
from collections import Counter
from typing import Any


def frame_label(filename: str, function: str) -> str:
    return f"{os.path.basename(filename)}:{function}"


CLOCKS = {"wall": ("ITIMER_REAL", "SIGALRM"), "cpu": ("ITIMER_PROF", "SIGPROF")}


class Sampler:
    """Counts the innermost Python frame every `interval_s` of elapsed (wall) or process CPU time."""

    def __init__(self, interval_s: float = 0.001, clock: str = "wall"):
        if not hasattr(signal, "setitimer"):
            raise OSError("signal.setitimer is not available on this platform (POSIX only)")
        if interval_s <= 0:
            raise ValueError("interval_s must be > 0")
        if clock not in CLOCKS:
            raise ValueError(f"clock must be one of {', '.join(CLOCKS)}")
        self.interval_s = float(interval_s)
        self.clock = clock
        self._timer, self._signal = (getattr(signal, n) for n in CLOCKS[clock])
        self.counts: Counter[str] = Counter()
        self.samples = 0
        self._previous: Any = None

    def _handler(self, signum: int, frame: Any) -> None:
        self.samples += 1
        if frame is not None:
            code = frame.f_code
            self.counts[frame_label(code.co_filename, code.co_name)] += 1

    def start(self) -> Sampler:
        self._previous = signal.signal(self._signal, self._handler)
        signal.setitimer(self._timer, self.interval_s, self.interval_s)
        return self

    def stop(self) -> Sampler:
        signal.setitimer(self._timer, 0.0, 0.0)
        signal.signal(self._signal, self._previous if self._previous is not None else signal.SIG_DFL)
        return self

    def __enter__(self) -> Sampler:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def hottest(self) -> str:
        return self.counts.most_common(1)[0][0] if self.counts else ""

    def shares(self) -> dict[str, float]:
        total = sum(self.counts.values()) or 1
        return {k: v / total for k, v in self.counts.most_common()}


class TracingProfile:
    """cProfile around a region: every call and return is recorded (deterministic profiling)."""

    def __init__(self) -> None:
        import cProfile

        self.profile = cProfile.Profile()

    def __enter__(self) -> TracingProfile:
        self.profile.enable()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.profile.disable()

    def own_times(self) -> dict[str, float]:
        """Own time (s) per Python source function, most first: see own_times()."""
        return own_times(self.profile)

    def hottest(self) -> str:
        own = self.own_times()
        return next(iter(own), "")


def own_times(profile: Any) -> dict[str, float]:
    """cProfile's tottime per Python source function plus the time of the C functions it called
    directly (builtins: list.append, math.exp, torch ops), most first, as "file.py:function"."""
    import pstats

    stats = pstats.Stats(profile).stats  # {(file, line, name): (cc, nc, tottime, cumtime, callers)}
    out: Counter[str] = Counter()
    for (filename, _line, name), (_cc, _nc, tottime, _cum, callers) in stats.items():
        if filename.endswith(".py"):
            out[frame_label(filename, name)] += tottime
        elif filename == "~":  # a C function: its time goes to the Python functions that called it
            for (cfile, _cline, cname), caller_stats in callers.items():
                if cfile.endswith(".py"):
                    out[frame_label(cfile, cname)] += caller_stats[2]
    return dict(out.most_common())
