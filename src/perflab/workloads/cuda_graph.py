"""A workload's GPU work captured once as a CUDA graph and replayed (what torch.compile's reduce-overhead mode
and the serving engines do): warm-up calls on a side stream, so lazy initialization, cuBLAS handles, NCCL
communicators and the caching allocator settle outside the capture, then the capture. torch is imported lazily.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any


def capture(fn: Callable[[], Any], pool: Any = None, warmups: int = 2, mode: Any = None) -> tuple[Any, Any]:
    """`fn()` (GPU work on tensors it holds) captured as a CUDA graph, under `mode` (default torch.no_grad), in
    the memory pool `pool` (default: a private one). Returns (graph, what fn returned: the static output)."""
    import torch

    mode = mode or torch.no_grad
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), mode():
        for _ in range(warmups):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()                     # nothing of the warm-up still in flight
    graph = torch.cuda.CUDAGraph()
    with mode(), torch.cuda.graph(graph, pool=pool):
        out = fn()
    return graph, out
