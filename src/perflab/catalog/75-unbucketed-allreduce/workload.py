"""unbucketed-allreduce: the slow workload (data-parallel training of 192 task heads, one all-reduce per head).

A frozen trunk (features = gelu(x @ T), 4096 -> 1024, bf16) feeds 192 task heads, each a
trainable weight of 1024 x 64 (bf16, 128 KiB; stored together as one [192, 1024, 64] tensor).
Every rank runs forward and backward on its own 4,096 rows (the loss: every head's squared
outputs, summed, averaged over the rows); then, like a hand-written data-parallel loop over the
model's parameters, it all-reduces each head's gradient on its own: 192 all-reduces of 128 KiB per
step. The step returns the mean gradient of every head, flat, head after head.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> tensor``.
Runs under torchrun (perflab.puzzles.evidence.multirank: NCCL on GPUs, gloo on the CPU) and, without a
process group, as one rank.
"""
from __future__ import annotations

from perflab.workloads import fresh, sizes
from perflab.workloads.ranks import rank_and_world

SIZE = {"inputs": 4096, "features": 1024, "heads": 192, "outputs": 64, "batch": 4096}
SMOKE_SIZE = {"inputs": 64, "features": 32, "heads": 12, "outputs": 8, "batch": 32}


def setup(device: str, seed: int) -> dict:
    import torch

    size = sizes.pick(device, SIZE, SMOKE_SIZE)
    rank, world = rank_and_world()
    d, f, k = size["inputs"], size["features"], size["outputs"]
    dtype = torch.bfloat16
    gen = torch.Generator(device).manual_seed(int(seed))          # the same model on every rank
    trunk = (torch.randn(d, f, generator=gen, device=device) / d ** 0.5).to(dtype)
    heads = (torch.randn(size["heads"], f, k, generator=gen, device=device) / f ** 0.5).to(dtype).requires_grad_()
    shard = torch.Generator(device).manual_seed(int(seed) * 7919 + rank)   # this rank's rows
    x = torch.randn(size["batch"], d, generator=shard, device=device).to(dtype)
    return {"size": size, "rank": rank, "world": world, "trunk": trunk, "heads": heads, "x": x}


def backward(state: dict) -> None:
    """Forward and backward of this rank's rows: heads.grad holds this rank's gradient of every head."""
    import torch
    import torch.nn.functional as F

    heads = state["heads"]
    heads.grad = None
    with torch.no_grad():
        feats = F.gelu(state["x"] @ state["trunk"])                 # the frozen trunk
    n, f, k = heads.shape
    y = feats @ heads.permute(1, 0, 2).reshape(f, n * k)           # every head's outputs, side by side
    (y.float().square().sum() / state["size"]["batch"]).backward()   # summed over heads, mean over rows


def step(state: dict):
    import torch.distributed as dist

    backward(state)
    grads = state["heads"].grad                                    # [heads, features, outputs]
    if state["world"] > 1:
        for g in grads:                                            # one all-reduce per head's gradient
            dist.all_reduce(g)
    return grads.reshape(-1).div_(state["world"])


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("x",)


refill = fresh.rank_rows   # new rows for this rank, seeded per rank as setup seeds its own data
