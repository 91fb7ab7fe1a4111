"""timer()'s per-measurement overhead: on an empty function and on a tiny kernel.

    python benchmarks/overhead_timer.py

The overhead is timer's median per call minus the mean per call of the same work timed in one
batch (one clock or one event pair around many calls). On the CPU it is the perf_counter path;
with a GPU, also the CUDA-event path.
"""
from __future__ import annotations

import statistics
import sys
import time

BATCH = 2000


def cpu(timer) -> None:
    import torch

    x = torch.zeros(1)

    def batch_ms(fn) -> float:
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(BATCH):
                fn()
            best = min(best, (time.perf_counter() - t0) * 1e3 / BATCH)
        return best

    for name, fn in [("empty function", lambda: None), ("tiny CPU op (x.add_(1), 1 element)", lambda: x.add_(1))]:
        t = timer(fn, warmup=100, repeats=2000, cuda=False)
        base = batch_ms(fn)
        print(f"perf_counter  {name:<40} timer median {t.median * 1e3:8.3f} µs, batched {base * 1e3:8.3f} µs"
              f" -> overhead {(t.median - base) * 1e3:7.3f} µs/measurement")


def gpu(timer) -> None:
    import torch

    x = torch.zeros(1, device="cuda")

    def batch_ms(fn) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(BATCH):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / BATCH

    for name, fn in [("empty function", lambda: None), ("tiny kernel (x.add_(1), 1 element)", lambda: x.add_(1))]:
        t = timer(fn, warmup=100, repeats=2000, cuda=True)
        base = statistics.median(batch_ms(fn) for _ in range(5))
        print(f"cuda-events   {name:<40} timer median {t.median * 1e3:8.3f} µs, batched {base * 1e3:8.3f} µs"
              f" -> overhead {(t.median - base) * 1e3:7.3f} µs/measurement (ratio {t.median / base:.2f}x)"
              if base > 0 else f"cuda-events   {name:<40} timer median {t.median * 1e3:8.3f} µs (no GPU work)")


def main() -> int:
    from perflab import timer

    cpu(timer)
    import torch

    if not torch.cuda.is_available():
        print("overhead_timer: no CUDA GPU here: CUDA-event path not measured")
        return 0
    gpu(timer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
