"""exposed-allreduce: the reference solution.

Same model, micro-batches, gradient bucket and result as workload.py. Each weight's gradient is
all-reduced as soon as backward has produced it (a post-accumulate-grad hook issues an asynchronous
all-reduce of that weight's slice of the bucket), so the all-reduce of layer k runs on NCCL's
stream while backward computes layer k-1. After backward the step waits for the outstanding
all-reduces (on the GPU: the compute stream waits for NCCL's, the host does not block) and divides.
DistributedDataParallel does the same with its buckets (bucket_cap_mb) and its autograd hooks.
"""
from __future__ import annotations

import os

from perflab.workloads.ranks import rank_and_world

SIZE = {"hidden": 4096, "layers": 8, "batch": 2048}
SMOKE_SIZE = {"hidden": 64, "layers": 3, "batch": 32}


def _size(device: str) -> dict:
    if str(device).startswith("cpu") or os.environ.get("PERFLAB_SMOKE", "0") != "0":
        return dict(SMOKE_SIZE)
    return dict(SIZE)


def setup(device: str, seed: int) -> dict:
    import torch
    import torch.distributed as dist

    size = _size(device)
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
    state = {"size": size, "rank": rank, "world": world, "weights": weights, "x": x, "out": bucket, "pending": []}
    if world > 1:
        def reduce_now(w):                                   # this gradient is complete: send it now
            state["pending"].append(dist.all_reduce(w.grad, async_op=True))

        for w in weights:
            w.register_post_accumulate_grad_hook(reduce_now)
    return state


def loss_of(state: dict):
    import torch.nn.functional as F

    h = state["x"]
    for w in state["weights"]:
        h = F.gelu(h @ w)
    return h.float().square().mean()


def step(state: dict):
    bucket = state["out"]
    bucket.zero_()
    loss_of(state).backward()                    # all-reduces start inside backward, layer by layer
    for work in state["pending"]:
        work.wait()                              # the GPU waits for NCCL; the host does not block
    state["pending"].clear()
    bucket.div_(state["world"])
    return bucket
