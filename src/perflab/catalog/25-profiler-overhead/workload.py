"""profiler-overhead: the slow workload (its measure is the profiler's cost, not the step's).

The ranking step of the pyspy-sampling puzzle (its workload.py: a host-bound loop that hashes and
weights every event of every request in Python, then an EmbeddingBag + MLP), run with always-on
profiling: every step runs under cProfile, and the step reports the function that held the most
own time, for the hot-spot dashboard.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state``; ``step(state)`` -> (scores float32
[batch], "file.py:function" of the hottest Python function of that step); ``bare_step(state)`` ->
the scores of the same step without any profiler (what the checker compares the cost against).
"""
from __future__ import annotations

import cProfile
import os
import pstats
from pathlib import Path

from perflab.workloads import siblings


def loop_file() -> Path:
    """The ranking loop: pyspy-sampling's workload.py (beside this puzzle in the catalog)."""
    return siblings.path(None, "24-pyspy-sampling")


_loop = siblings.load(None, "24-pyspy-sampling")
SIZE = _loop.SIZE


def hottest(profile: cProfile.Profile) -> str:
    """file.py:function of the Python function with the most own time: cProfile's tottime plus the
    time of the C functions it called directly (list.append, math.exp, torch ops), which cProfile
    books apart and a sampling profiler charges to the caller."""
    own: dict[str, float] = {}
    for (filename, _line, name), (_cc, _nc, tottime, _cum, callers) in pstats.Stats(profile).stats.items():
        if filename.endswith(".py"):
            key = f"{os.path.basename(filename)}:{name}"
            own[key] = own.get(key, 0.0) + tottime
        elif filename == "~":  # a builtin: its time belongs to its Python callers
            for (cfile, _cline, cname), caller_stats in callers.items():
                if cfile.endswith(".py"):
                    key = f"{os.path.basename(cfile)}:{cname}"
                    own[key] = own.get(key, 0.0) + caller_stats[2]
    return max(own, key=own.get, default="")


def setup(device: str, seed: int) -> dict:
    # always the full size, smoke runs too: a profile of a step needs enough work to name its hot spot
    state = _loop.build(device, seed, size=_loop.full_size(device))
    step(state)  # warm up, profiled: one-time costs (CUDA, cuBLAS, the profiler's first run) would be its hot spot
    return state


def bare_step(state: dict):
    return _loop.step(state)


def step(state: dict):
    profile = cProfile.Profile()
    profile.enable()
    try:
        scores = _loop.step(state)
    finally:
        profile.disable()
    return scores, hottest(profile)


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = _loop.INPUTS
refill = _loop.refill   # the loop's own: new ids and ages in its pool
