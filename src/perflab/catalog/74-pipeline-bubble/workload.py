"""pipeline-bubble: the slow workload (a 2-stage pipeline-parallel training step, GPipe, 2 micro-batches).

The model (8 layers of x = gelu(x @ W), hidden 4096, no bias, bf16) is split into N stages, one per rank:
rank s holds layers [s*8/N, (s+1)*8/N). Every step trains on one batch of 16,384 rows, cut into
MICRO_BATCHES micro-batches and run on the GPipe schedule: every stage runs the forward of every
micro-batch (sending its activations to the next stage), then the backward of every micro-batch (the
last stage starts from the loss, the others from the activation gradient the next stage sends back).
The loss is the last layer's squared outputs summed per row, averaged over the whole batch (scaled);
gradients accumulate over the micro-batches into each stage's flat gradient bucket.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> tensor``.
Runs under torchrun (perflab.puzzles.evidence.multirank: NCCL on GPUs, gloo on the CPU) and, without a
process group, as one rank holding every stage. ``step`` returns this rank's flat gradient bucket
(bf16, its layers one after another).
"""
from __future__ import annotations

from perflab.workloads import sizes
from perflab.workloads.ranks import rank_and_world

SIZE = {"hidden": 4096, "layers": 8, "batch": 16384}
SMOKE_SIZE = {"hidden": 64, "layers": 4, "batch": 64}
MICRO_BATCHES = 2


def setup(device: str, seed: int) -> dict:
    import torch

    size = sizes.pick(device, SIZE, SMOKE_SIZE)
    rank, world = rank_and_world()
    h, n = size["hidden"], size["layers"]
    dtype = torch.bfloat16
    gen = torch.Generator(device).manual_seed(int(seed))          # the same model on every rank
    every = [(torch.randn(h, h, generator=gen, device=device) / h ** 0.5).to(dtype) for _ in range(n)]
    mine = slice(rank * n // world, (rank + 1) * n // world)       # this stage's layers
    weights = [w.requires_grad_() for w in every[mine]]
    x = torch.randn(size["batch"], h, generator=gen, device=device).to(dtype)   # the batch (stage 0 reads it)
    bucket = torch.zeros(len(weights) * h * h, device=device, dtype=dtype)
    for i, w in enumerate(weights):                                # .grad of every weight: a view into the bucket
        w.grad = bucket[i * h * h:(i + 1) * h * h].view(h, h)
    return {"size": size, "rank": rank, "world": world, "weights": weights, "x": x, "bucket": bucket,
            "device": str(device)}


def stage_forward(state: dict, h):
    import torch.nn.functional as F

    for w in state["weights"]:
        h = F.gelu(h @ w)
    return h


def loss_of(state: dict, y):
    """This micro-batch's share of the batch loss: squared outputs summed per row, averaged over the batch,
    times a static loss scale (the width) that keeps the bf16 gradients far from underflow."""
    size = state["size"]
    return y.float().square().sum() * (size["hidden"] / size["batch"])


def micro_batches(state: dict, m: int) -> list:
    return list(state["x"].chunk(m))


def gpipe_step(state: dict, m: int):
    """One training step on the GPipe schedule with m micro-batches: all forwards, then all backwards."""
    import torch
    import torch.distributed as dist

    rank, world = state["rank"], state["world"]
    first, last = rank == 0, rank == world - 1
    state["bucket"].zero_()
    rows = state["size"]["batch"] // m
    shape = (rows, state["size"]["hidden"])
    ins, outs, pending = [], [], []
    for mb in (micro_batches(state, m) if first else range(m)):      # forward of every micro-batch
        if first:
            a = mb
        else:
            a = torch.empty(shape, device=state["device"], dtype=torch.bfloat16)
            dist.recv(a, src=rank - 1)                               # the previous stage's activations
            a.requires_grad_()
        y = stage_forward(state, a)
        if not last:
            pending.append(dist.isend(y.detach(), dst=rank + 1))    # on to the next stage
        ins.append(a)
        outs.append(y)
    for a, y in zip(ins, outs):                                     # backward of every micro-batch
        if last:
            loss_of(state, y).backward()
        else:
            g = torch.empty(shape, device=state["device"], dtype=torch.bfloat16)
            dist.recv(g, src=rank + 1)                               # the next stage's activation gradient
            y.backward(g)
        if not first:
            pending.append(dist.isend(a.grad, dst=rank - 1))         # back to the previous stage
    for work in pending:
        work.wait()
    return state["bucket"]


def step(state: dict):
    return gpipe_step(state, MICRO_BATCHES)


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("x",)  # the same batch on every rank (stage 0 reads it): the default refill is rank-independent
