"""timer(fn): time a callable honestly.

GPU work is asynchronous: a host clock around a launch measures the launch, not the work. So when
CUDA is involved each repeat is bracketed by a pair of CUDA events on the current stream (read after
one synchronize at the end); otherwise `time.perf_counter` brackets each call (CPU work is
synchronous). A host clock is never read around GPU work without a synchronize.

Per-measurement overhead (what an empty function measures; benchmarks/overhead_timer.py prints it
for the machine at hand): with perf_counter, the call plus two clock reads, about 0.1-0.3 µs on a
recent x86 CPU; with CUDA events, the GPU-side gap between two event records, a few µs of the
launch path on the host, and the events' own resolution of about 0.5 µs.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from time import perf_counter
from typing import Any, Callable

import numpy as np

from perflab.errors import NeedsGPU, PerflabError


@dataclass(frozen=True)
class Timing:
    """Samples in ms, one per repeat, and their statistics."""

    samples_ms: tuple[float, ...]
    method: str  # "cuda-events" | "perf_counter"

    def _q(self, q: float) -> float:
        return float(np.percentile(self.samples_ms, q))

    @property
    def n(self) -> int:
        return len(self.samples_ms)

    @property
    def median(self) -> float:
        return self._q(50)

    @property
    def mean(self) -> float:
        return float(np.mean(self.samples_ms))

    @property
    def stdev(self) -> float:
        return float(np.std(self.samples_ms, ddof=1)) if self.n > 1 else 0.0

    @property
    def min(self) -> float:
        return float(np.min(self.samples_ms))

    @property
    def max(self) -> float:
        return float(np.max(self.samples_ms))

    @property
    def p10(self) -> float:
        return self._q(10)

    @property
    def p90(self) -> float:
        return self._q(90)

    def to_dict(self) -> dict[str, Any]:
        stats = ("median", "mean", "stdev", "min", "max", "p10", "p90")
        return {"method": self.method, "n": self.n, **{f"{k}_ms": getattr(self, k) for k in stats},
                "samples_ms": list(self.samples_ms)}

    def __str__(self) -> str:
        return (f"median {self.median:.4g} ms (p10 {self.p10:.4g}, p90 {self.p90:.4g}, mean {self.mean:.4g} "
                f"± {self.stdev:.2g}, min {self.min:.4g}; n={self.n}, {self.method})")


def _walk(obj: Any, depth: int = 0):
    """Tensors in obj, through lists, tuples, dicts and module parameters."""
    if depth > 3:
        return
    if isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _walk(item, depth + 1)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _walk(item, depth + 1)
    elif hasattr(obj, "is_cuda"):
        yield obj
    elif hasattr(obj, "parameters") and callable(obj.parameters):
        yield from (p for p, _ in zip(obj.parameters(), range(1)))


def uses_cuda(args: tuple, kwargs: dict) -> bool:
    """CUDA tensors among the arguments, or (for closures) a process that has initialized CUDA."""
    torch = sys.modules.get("torch")  # a function that never imported torch does no GPU work
    if torch is None or not torch.cuda.is_available():
        return False
    if any(t.is_cuda for t in _walk((args, kwargs))):
        return True
    return torch.cuda.is_initialized()


def timer(fn: Callable, *args: Any, warmup: int = 10, repeats: int = 50, cuda: bool | None = None,
          **kwargs: Any) -> Timing:
    """Call fn(*args, **kwargs) warmup times, then time `repeats` calls, one sample each.

    cuda=None decides by itself (CUDA tensors in the arguments, or CUDA already in use by this
    process); pass cuda=False to time CPU-only work in a process that also uses the GPU.
    """
    if repeats < 1 or warmup < 0:
        raise PerflabError(f"need repeats >= 1 and warmup >= 0 (got {repeats}, {warmup})")
    if cuda is None:
        cuda = uses_cuda(args, kwargs)
    for _ in range(warmup):
        fn(*args, **kwargs)
    if cuda:
        return Timing(tuple(_cuda_samples(fn, args, kwargs, repeats)), "cuda-events")
    samples = []
    for _ in range(repeats):
        t0 = perf_counter()
        fn(*args, **kwargs)
        samples.append((perf_counter() - t0) * 1e3)
    return Timing(tuple(samples), "perf_counter")


def require_cuda(what: str) -> Any:
    """torch, when it has a CUDA GPU; NeedsGPU naming `what` otherwise."""
    try:
        import torch
    except ImportError:
        raise NeedsGPU(f"{what} needs torch with CUDA: pip install torch") from None
    if not torch.cuda.is_available():
        raise NeedsGPU(f"{what} needs a CUDA GPU: torch.cuda.is_available() is False")
    return torch


def _cuda_samples(fn: Callable, args: tuple, kwargs: dict, repeats: int) -> list[float]:
    torch = require_cuda("timer(cuda=True)")
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
    torch.cuda.synchronize()  # the warm-up's work must not spill into the first sample
    for start, end in events:
        start.record()
        fn(*args, **kwargs)
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in events]
