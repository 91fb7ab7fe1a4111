"""exposed-allreduce: the slow workload (a data-parallel training step; gradients all-reduced at the end).

Every rank runs forward and backward of the same MLP (8 layers of x = gelu(x @ W), hidden 8192,
no bias, bf16) on its own micro-batch of 2,048 rows. The gradients live in one flat bucket (each
weight's .grad is a view into it, like DistributedDataParallel's gradient_as_bucket_view), and once
backward has finished, one all-reduce sums the whole bucket across ranks, then it is divided by the
world size: every rank ends with the mean gradient.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> tensor``.
Runs under torchrun (perflab.puzzles.evidence.multirank: NCCL on GPUs, gloo on the CPU) and, without a
process group, as one rank. ``step`` returns the flat mean-gradient bucket (``state["out"]``,
bf16, layer after layer).
"""
from __future__ import annotations

from perflab.workloads import fresh, sizes
from perflab.workloads.ranks import rank_and_world

SIZE = {"hidden": 8192, "layers": 8, "batch": 2048}
SMOKE_SIZE = {"hidden": 64, "layers": 3, "batch": 32}


def setup(device: str, seed: int) -> dict:
    import torch

    size = sizes.pick(device, SIZE, SMOKE_SIZE)
    rank, world = rank_and_world()
    h, n = size["hidden"], size["layers"]
    dtype = torch.bfloat16
    gen = torch.Generator(device).manual_seed(int(seed))          # the same model on every rank
    weights = [(torch.randn(h, h, generator=gen, device=device) / h ** 0.5).to(device, dtype).requires_grad_() for _ in range(n)]
    shard = torch.Generator(device).manual_seed(int(seed) * 7919 + rank)   # this rank's micro-batch
    x = torch.randn(size["batch"], h, generator=shard, device=device).to(device, dtype)
    bucket = torch.zeros(n * h * h, device=device, dtype=dtype)
    for i, w in enumerate(weights):                          # .grad of every weight: a view into the bucket
        w.grad = bucket[i * h * h:(i + 1) * h * h].view(h, h)
    return {"size": size, "rank": rank, "world": world, "weights": weights, "x": x, "out": bucket}


def loss_of(state: dict):
    import torch.nn.functional as F

    h = state["x"]
    for w in state["weights"]:
        h = F.gelu(h @ w)
    return h.float().square().mean()


def step(state: dict):
    import torch.distributed as dist

    bucket = state["out"]
    bucket.zero_()
    loss_of(state).backward()                    # every gradient accumulates into its view of the bucket
    if state["world"] > 1:
        dist.all_reduce(bucket)                  # all gradients at once, after all of backward
    bucket.div_(state["world"])
    return bucket


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("x",)


refill = fresh.rank_rows   # new rows for this rank, seeded per rank as setup seeds its own data
