"""memory-timeline: the slow workload (its measure is peak GPU memory, not time).

A 32-block residual MLP tower (width 1,024, expansion 4, bf16 on the GPU) scores a batch of 4,096
feature vectors per step. The model came straight from the training code: its weights are
``nn.Parameter`` s that require grad, and the serving step calls it without ``torch.no_grad()`` or
``torch.inference_mode()``. Autograd therefore records every block's graph and keeps the tensors
the backward pass would need (each block's input, the expanded pre-activation and the GELU output)
alive until the step's output is dropped, although nobody will ever call ``backward()``.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> tensor``
(the scores [batch, 1], float32). On the CPU (smoke runs) the same tower, tiny, in float32.
"""
from __future__ import annotations

from perflab.workloads import sizes

SIZE = {"batch": 4096, "width": 1024, "expand": 4, "blocks": 32}
SMOKE_SIZE = {"batch": 64, "width": 32, "expand": 4, "blocks": 4}


def build(device: str, seed: int) -> dict:
    """The tower (trainable parameters, as exported from training) and one input batch."""
    import torch
    from torch import nn

    size = sizes.pick(device, SIZE, SMOKE_SIZE)
    dtype = torch.bfloat16 if str(device).startswith("cuda") else torch.float32
    gen = torch.Generator().manual_seed(int(seed))
    w, h = size["width"], size["width"] * size["expand"]

    def param(*shape, scale):
        return nn.Parameter((torch.randn(*shape, generator=gen) * scale).to(device=device, dtype=dtype))

    blocks = [{"up": param(h, w, scale=w ** -0.5), "down": param(w, h, scale=h ** -0.5 / size["blocks"] ** 0.5)}
              for _ in range(size["blocks"])]
    head = param(1, w, scale=w ** -0.5)
    x = (torch.randn(size["batch"], w, generator=gen)).to(device=device, dtype=dtype)
    return {"size": size, "blocks": blocks, "head": head, "x": x, "device": str(device)}


def block(x, up, down):
    """One residual MLP block: x + down(gelu(up(x)))."""
    import torch.nn.functional as F

    return x + F.linear(F.gelu(F.linear(x, up)), down)


def tower(state: dict):
    x = state["x"]
    for b in state["blocks"]:
        x = block(x, b["up"], b["down"])
    import torch.nn.functional as F

    return F.linear(x, state["head"]).float()


def setup(device: str, seed: int) -> dict:
    return build(device, seed)


def step(state: dict):
    return tower(state)


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("x",)
