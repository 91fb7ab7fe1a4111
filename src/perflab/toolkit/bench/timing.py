"""Device timing: CUDA events around the region, warm-up first, median of repeats (METHOD.md)."""
from __future__ import annotations

import statistics
import time
from typing import Callable


def median_ms(fn: Callable[[], object], *, warmup: int, repeats: int, backend: str = "torch") -> tuple[float, list[float]]:
    """Median milliseconds of `fn` timed with CUDA events on the current stream of `backend`."""
    if backend == "cupy":
        import cupy

        make, sync = cupy.cuda.Event, cupy.cuda.Device().synchronize

        def elapsed(a, b):
            return cupy.cuda.get_elapsed_time(a, b)
    else:
        import torch

        sync = torch.cuda.synchronize

        def make():
            return torch.cuda.Event(enable_timing=True)

        def elapsed(a, b):
            return a.elapsed_time(b)
    for _ in range(warmup):
        fn()
    sync()
    samples = []
    for _ in range(repeats):
        start, end = make(), make()
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(float(elapsed(start, end)))
    return statistics.median(samples), samples


def median_wall_s(fn: Callable[[], object], *, repeats: int) -> tuple[float, list[float]]:
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples), samples
