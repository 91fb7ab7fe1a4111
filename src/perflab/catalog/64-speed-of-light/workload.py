"""speed-of-light: the slow workload.

An embedding adapter served one request at a time. The model is a bottleneck MLP on 8192-wide bf16
embeddings, y = W2 gelu(W1 x + b1) + b2 (8192 -> 2048 -> 8192, 33.6 M parameters, 64 MiB in bf16).
Every step, N=1024 requests are waiting, each with 32 embeddings (``state["requests"]`` [N, 32, 8192]
bf16); the server runs the model on each request separately, in a Python loop, and returns all the
outputs [N, 32, 8192] bf16 in request order.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> tensor``.
"""
from __future__ import annotations

import math

from perflab.workloads import sizes

SIZE = {"requests": 1024, "rows": 32, "dim": 8192, "hidden": 2048}
SMOKE_SIZE = {"requests": 6, "rows": 4, "dim": 64, "hidden": 16}


def gemm_flop_per_step(size: dict) -> float:
    """FLOPs of one step's matrix multiplies (2 per multiply-add): two GEMMs over every row of every request."""
    return 2 * 2.0 * size["requests"] * size["rows"] * size["dim"] * size["hidden"]


def _build(device: str, seed: int) -> dict:
    """Weights and the N waiting requests (bf16), drawn on the device from ``seed``."""
    import torch

    size = sizes.pick(device, SIZE, SMOKE_SIZE)
    gen = torch.Generator(device=device).manual_seed(int(seed))
    d, h = size["dim"], size["hidden"]

    def randn(*shape, std=1.0):
        return torch.randn(*shape, generator=gen, device=device, dtype=torch.bfloat16).mul_(std)

    return {"size": size, "device": str(device),
            "w1": randn(h, d, std=1.0 / math.sqrt(d)), "b1": randn(h, std=0.1),
            "w2": randn(d, h, std=1.0 / math.sqrt(h)), "b2": randn(d, std=0.1),
            "requests": randn(size["requests"], size["rows"], d)}


def forward(state: dict, x):
    """The model on x [B, dim] bf16 -> [B, dim] bf16."""
    import torch.nn.functional as F

    return F.linear(F.gelu(F.linear(x, state["w1"], state["b1"])), state["w2"], state["b2"])


def setup(device: str, seed: int) -> dict:
    return _build(device, seed)


def step(state: dict):
    import torch

    with torch.no_grad():
        return torch.stack([forward(state, x) for x in state["requests"]])   # one request at a time


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("requests",)
