"""Helpers shared by the multi-GPU puzzles' workloads (catalog 70-73): who am I, a graph per shape.

The workloads run under torchrun (perflab.puzzles.evidence.multirank initializes the process group before
their setup) and also as one rank without a process group (CPU smoke tests). torch is imported lazily.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from perflab.workloads.cuda_graph import capture


def rank_and_world() -> tuple[int, int]:
    """(rank, world size) of the process group, or (0, 1) without one."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def graphed(cache: dict, device: str, fn: Callable[[Any], Any], x: Any) -> Any:
    """fn(x) through a CUDA graph captured once per input shape into `cache` (eager on the CPU).

    Collectives inside fn are captured too (NCCL); the warm-up runs eagerly on a side stream first,
    so communicators and cuBLAS workspaces exist before the capture."""
    if not str(device).startswith("cuda"):
        return fn(x)
    key = tuple(x.shape)
    if key not in cache:
        static_in = x.clone()
        graph, static_out = capture(lambda: fn(static_in), warmups=3, mode=contextlib.nullcontext)
        cache[key] = (graph, static_in, static_out)
    graph, static_in, static_out = cache[key]
    static_in.copy_(x)
    graph.replay()
    return static_out
