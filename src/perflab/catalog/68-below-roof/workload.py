"""below-roof: the slow workload.

A bf16 projection, y = x W^T + b, over a batch of 2048 token vectors (4096 -> 4096 features), written with
"the bias trick" of the linear-algebra textbooks: the bias is folded into the weights as one more column,
W_aug = [W | b] ([4096, 4097], built once in setup()), and every input row gets a 1 appended,
x_aug = [x | 1] ([2048, 4097], every step), so that a single matrix product gives the affine map:
y = x_aug W_aug^T = x W^T + 1 * b. One GEMM, no separate bias add.

On device "cpu" (or with PERFLAB_SMOKE=1) the same code runs at SMOKE_SIZE.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> y`` ([2048, 4096] bf16).
"""
from __future__ import annotations

import math

from perflab.workloads import sizes

SIZE = {"tokens": 2048, "d_in": 4096, "d_out": 4096}
SMOKE_SIZE = {"tokens": 8, "d_in": 32, "d_out": 24}


def make_params(device: str, seed: int) -> dict:
    """x [tokens, d_in], W [d_out, d_in] and b [d_out] in bf16, drawn on the device from ``seed``."""
    import torch

    size = sizes.pick(device, SIZE, SMOKE_SIZE)
    gen = torch.Generator(device=device).manual_seed(int(seed))

    def randn(*shape, std=1.0):
        return torch.randn(*shape, generator=gen, device=device, dtype=torch.bfloat16).mul_(std)

    return {"size": size, "x": randn(size["tokens"], size["d_in"]),
            "w": randn(size["d_out"], size["d_in"], std=1.0 / math.sqrt(size["d_in"])), "b": randn(size["d_out"])}


def setup(device: str, seed: int) -> dict:
    import torch

    p = make_params(device, seed)
    w_aug = torch.cat([p["w"], p["b"][:, None]], dim=1)        # [d_out, d_in + 1]: the bias as a weight column
    return {"size": p["size"], "x": p["x"], "w_aug": w_aug}


def step(state: dict):
    import torch
    import torch.nn.functional as F

    with torch.no_grad():
        x = state["x"]
        x_aug = torch.cat([x, x.new_ones(x.shape[0], 1)], dim=1)   # [tokens, d_in + 1]: a 1 for the bias column
        return F.linear(x_aug, state["w_aug"])                      # x_aug @ w_aug^T = x @ W^T + b


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("x",)
