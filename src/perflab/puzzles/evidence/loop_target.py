"""Run a puzzle variant's steps in a loop of its own, for tools that watch a whole process.

    python -m perflab.puzzles.evidence.loop_target FILE [--device D] [--seed N] [--warmup N]
        [--steps N | --seconds S] [--rounds R] [--inproc KIND[,KIND...]] [--result OUT.json]

KIND: none | cprofile | yappi | sampler | pyinstrument.

py-spy, Scalene and the in-process profilers see the whole process: imports, setup, warm-up. The
steps worth looking at all run inside `sampled_steps` (a frame the readers select on:
analysis.steps.sampling keeps only the samples under it). `--inproc` starts an in-process profiler
around the loop only; `--result` writes the loop's own timing (per-step ms, perf_counter, the device
drained after each step) so that an external profiler's cost is measured without its start-up.
With several kinds and rounds, the kinds take turns round after round (interleaved, so drift hits
all alike); each round's median ms per step is one repeat of that kind.
"""
from __future__ import annotations

import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from perflab.puzzles.evidence import variant_program

LOOP_FUNCTION = "sampled_steps"
INPROC = ("none", "cprofile", "yappi", "sampler", "pyinstrument")
SAMPLER_INTERVAL_S = 0.001


def sampled_steps(module: Any, state: Any, device: str, steps: int, seconds: float) -> list[float]:
    """The measured loop: `steps` steps, or as many as fit in `seconds`; ms per step."""
    from perflab.puzzles.engine.runner import synchronize

    times: list[float] = []
    end = time.perf_counter() + seconds
    while (len(times) < steps) if steps else (time.perf_counter() < end or not times):
        t0 = time.perf_counter()
        module.step(state)
        synchronize(device)
        times.append((time.perf_counter() - t0) * 1e3)
    return times


class _Inproc:
    """One in-process profiler around the loop (none: nothing)."""

    def __init__(self, kind: str):
        self.kind, self.impl = kind, None

    def __enter__(self) -> _Inproc:
        if self.kind == "cprofile":
            from perflab.toolkit.sampling import TracingProfile

            self.impl = TracingProfile().__enter__()
        elif self.kind == "sampler":
            from perflab.toolkit.sampling import Sampler

            self.impl = Sampler(SAMPLER_INTERVAL_S).start()
        elif self.kind == "yappi":
            import yappi

            yappi.set_clock_type("cpu")
            yappi.start(builtins=True)
        elif self.kind == "pyinstrument":
            from pyinstrument import Profiler

            self.impl = Profiler(interval=0.001)
            self.impl.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.kind == "cprofile":
            self.impl.__exit__()
        elif self.kind == "sampler":
            self.impl.stop()
        elif self.kind == "yappi":
            import yappi

            yappi.stop()
        elif self.kind == "pyinstrument":
            self.impl.stop()

    def hottest(self) -> str:
        if self.kind in ("cprofile", "sampler"):
            return self.impl.hottest()
        if self.kind == "yappi":
            import os

            import yappi

            funcs = [f for f in yappi.get_func_stats() if str(f.module).endswith(".py")]
            best = max(funcs, key=lambda f: f.tsub, default=None)
            yappi.clear_stats()
            return f"{os.path.basename(best.module)}:{best.name}" if best else ""
        return ""


def main(argv: list[str] | None = None) -> int:
    ap = variant_program.parser(__doc__, device="")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--inproc", default="none", help="comma-separated: " + ", ".join(INPROC))
    ap.add_argument("--result", type=Path)
    args = ap.parse_args(argv)
    kinds = [k.strip() for k in args.inproc.split(",") if k.strip()]
    bad = [k for k in kinds if k not in INPROC]
    if bad or not kinds:
        ap.error(f"--inproc: {', '.join(bad) or 'nothing'} not among {', '.join(INPROC)}")
    from perflab.errors import PerflabError
    from perflab.puzzles.engine.runner import cuda_available, load_module, synchronize

    try:
        device = args.device or ("cuda" if cuda_available() else "cpu")
        module = load_module(args.file)
        state = module.setup(device, args.seed)
        for _ in range(args.warmup):
            module.step(state)
        synchronize(device)
        rounds: dict[str, list[float]] = {k: [] for k in kinds}
        times: dict[str, list[float]] = {k: [] for k in kinds}
        hottest: dict[str, str] = {}
        for _ in range(max(args.rounds, 1)):
            for kind in kinds:
                gc.collect()  # the tracing profilers' garbage is not the next kind's cost
                with _Inproc(kind) as prof:
                    got = sampled_steps(module, state, device, args.steps, args.seconds)
                rounds[kind].append(statistics.median(got))
                times[kind].extend(got)
                hottest[kind] = prof.hottest()
    except PerflabError as exc:
        print(f"loop_target: error: {exc}", file=sys.stderr)
        return 2
    if args.result:
        args.result.write_text(json.dumps({
            "file": str(args.file), "device": device, "kinds": kinds, "rounds_ms": rounds,
            "median_ms": {k: statistics.median(v) for k, v in rounds.items()}, "times_ms": times,
            "hottest": hottest}) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
