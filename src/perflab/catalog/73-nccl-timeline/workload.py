"""nccl-timeline: the slow workload (sharded-weight inference: gather each layer's weight, then use it).

The model (16 layers of x = gelu(x @ W), hidden 4096, bf16) is too big to replicate in the story,
so every rank keeps 1/N of each weight (ZeRO-3 / FSDP style) and serves its own batch of 8,192
requests. Before each layer, the ranks all-gather that layer's weight into one full-weight buffer,
then multiply. After the last layer, one small all-reduce adds up the batch's per-feature activation
sums across ranks (a monitoring statistic).

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> (y, totals)``.
Runs under torchrun (perflab.puzzles.evidence.multirank: NCCL on GPUs, gloo on the CPU) and, without a
process group, as one rank. ``y`` is this rank's [batch, hidden] output (bf16), ``totals`` the
[hidden] fp32 sums over every rank's batch.
"""
from __future__ import annotations

from perflab.workloads import fresh, sizes
from perflab.workloads.ranks import rank_and_world

SIZE = {"hidden": 4096, "layers": 16, "batch": 8192}
SMOKE_SIZE = {"hidden": 64, "layers": 4, "batch": 32}


def setup(device: str, seed: int) -> dict:
    import torch

    size = sizes.pick(device, SIZE, SMOKE_SIZE)
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
    full = torch.empty(h * h, device=device, dtype=dtype)   # one layer's gathered weight
    return {"size": size, "rank": rank, "world": world, "shards": shards, "x": x, "full": full,
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

    h = state["size"]["hidden"]
    with torch.no_grad():
        y = state["x"]
        for i in range(len(state["shards"])):
            gather(state, i, state["full"])          # the weight, then the layer: one after the other
            y = F.gelu(y @ state["full"].view(h, h))
        return finish(state, y)


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("x",)


refill = fresh.rank_rows   # new rows for this rank, seeded per rank as setup seeds its own data
