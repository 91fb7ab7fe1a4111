"""nccl-timeline: the reference solution.

Same shards, requests and outputs as workload.py. The weights are gathered one layer ahead into two
alternating buffers: while layer i multiplies with buffer i % 2, the all-gather of layer i+1 fills
the other buffer on NCCL's stream (async_op=True, waited for on the GPU just before the layer that
needs it). Only the first layer's gather and the final small all-reduce are left exposed. FSDP's
forward prefetch does the same.
"""
from __future__ import annotations

import os

from perflab.workloads.ranks import rank_and_world

SIZE = {"hidden": 4096, "layers": 16, "batch": 3072}
SMOKE_SIZE = {"hidden": 64, "layers": 4, "batch": 32}


def _size(device: str) -> dict:
    if str(device).startswith("cpu") or os.environ.get("PERFLAB_SMOKE", "0") != "0":
        return dict(SMOKE_SIZE)
    return dict(SIZE)


def setup(device: str, seed: int) -> dict:
    import torch

    size = _size(device)
    rank, world = rank_and_world()
    h = size["hidden"]
    dtype = torch.bfloat16
    gen = torch.Generator(device).manual_seed(int(seed))
    shards = []
    for _ in range(size["layers"]):                          # keep only this rank's 1/world of each weight
        w = (torch.randn(h * h, generator=gen, device=device) / h ** 0.5).to(dtype)
        shards.append(w.chunk(world)[rank].clone().to(device))
    requests = torch.Generator(device).manual_seed(int(seed) * 7919 + rank)
    x = torch.randn(size["batch"], h, generator=requests, device=device).to(device, dtype)
    bufs = [torch.empty(h * h, device=device, dtype=dtype) for _ in range(2)]   # double buffer
    return {"size": size, "rank": rank, "world": world, "shards": shards, "x": x, "bufs": bufs,
            "totals": torch.zeros(h, device=device, dtype=torch.float32)}


def gather(state: dict, i: int, buf, async_op: bool = False):
    """All-gather layer i's weight shards into buf (flat, hidden*hidden)."""
    import torch.distributed as dist

    if state["world"] == 1:
        buf.copy_(state["shards"][i])
        return None
    return dist.all_gather_into_tensor(buf, state["shards"][i], async_op=async_op)


def finish(state: dict, y):
    import torch
    import torch.distributed as dist

    totals = state["totals"]
    torch.sum(y.float(), dim=0, out=totals)
    if state["world"] > 1:
        dist.all_reduce(totals)
    return y, totals


def step(state: dict):
    import torch
    import torch.nn.functional as F

    h, n = state["size"]["hidden"], len(state["shards"])
    bufs = state["bufs"]
    with torch.no_grad():
        y = state["x"]
        work = gather(state, 0, bufs[0], async_op=True)
        for i in range(n):
            if work is not None:
                work.wait()                                  # the GPU waits for layer i's weight
            work = gather(state, i + 1, bufs[(i + 1) % 2], async_op=True) if i + 1 < n else None
            y = F.gelu(y @ bufs[i % 2].view(h, h))          # runs while layer i+1's weight arrives
        return finish(state, y)
