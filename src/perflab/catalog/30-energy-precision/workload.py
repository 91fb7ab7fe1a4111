"""energy-precision: the slow workload.

An embedding service's batch: 4096 requests, each a [4096] fp32 vector, through one transformer-style
MLP block in fp32, y = gelu(x @ W1) @ W2 (W1 [4096, 8192], W2 [8192, 4096]): 0.55 TFLOP per batch, on
the FP32 SIMT pipes. One inference is one request (one row).

``step`` returns y [4096, 4096] fp32.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> tensor``.
"""
from __future__ import annotations

import math

from perflab.workloads import sizes

SIZE = {"batch": 4096, "dim": 4096, "hidden": 8192}
SMOKE_SIZE = {"batch": 8, "dim": 32, "hidden": 64}


def _build(device: str, seed: int) -> dict:
    """Requests and weights (fp32, on the device), drawn from ``seed``."""
    import torch

    size = sizes.pick(device, SIZE, SMOKE_SIZE)
    gen = torch.Generator(device=device).manual_seed(int(seed))
    b, d, f = size["batch"], size["dim"], size["hidden"]

    def randn(*shape, std=1.0):
        return torch.randn(*shape, generator=gen, device=device) * std

    return {"size": size, "device": str(device), "x": randn(b, d), "w1": randn(d, f, std=1.0 / math.sqrt(d)),
            "w2": randn(f, d, std=1.0 / math.sqrt(f))}


def mlp(x, w1, w2):
    import torch.nn.functional as F

    return F.gelu(x @ w1) @ w2


def setup(device: str, seed: int) -> dict:
    return _build(device, seed)


def step(state: dict):
    import torch

    with torch.no_grad():
        return mlp(state["x"], state["w1"], state["w2"])


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("x",)
