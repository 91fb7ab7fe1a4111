"""unfused-elementwise: the slow workload.

The epilogue of a feed-forward block, written out the way the paper states it: bias, the tanh
approximation of GELU, a per-channel scale and the residual,

    h = x + bias
    y = residual + gamma * 0.5 * h * (1 + tanh(sqrt(2/pi) * (h + 0.044715 * h^3)))

on an activation x [16384, 4096] fp32 (256 MiB). Every tensor op below is its own CUDA kernel that
reads its inputs from HBM and writes a full-size result back. ``step`` returns y [16384, 4096] fp32.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> tensor``.
"""
from __future__ import annotations

import math

from perflab.workloads import sizes

SIZE = {"rows": 16384, "dim": 4096}
INPUTS = ("x", "residual")   # refilled before every timed repetition of a fix check (puzzles/engine/guard.py)
SMOKE_SIZE = {"rows": 64, "dim": 32}
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _build(device: str, seed: int) -> dict:
    """Activation, residual and the per-channel bias and scale, drawn on the device from ``seed``."""
    import torch

    size = sizes.pick(device, SIZE, SMOKE_SIZE)
    gen = torch.Generator(device=device).manual_seed(int(seed))
    n, d = size["rows"], size["dim"]

    def randn(*shape, std=1.0):
        return torch.randn(*shape, generator=gen, device=device) * std

    return {"size": size, "device": str(device), "x": randn(n, d), "residual": randn(n, d),
            "bias": randn(d, std=0.1), "gamma": 1.0 + randn(d, std=0.1)}


def epilogue(x, bias, gamma, residual):
    """bias + tanh-GELU + scale + residual, one tensor op at a time."""
    import torch

    h = x + bias
    inner = h * h * h * 0.044715 + h
    t = torch.tanh(inner * SQRT_2_OVER_PI)
    g = 0.5 * h * (1.0 + t)
    return g * gamma + residual


def setup(device: str, seed: int) -> dict:
    return _build(device, seed)


def step(state: dict):
    import torch

    with torch.no_grad():
        return epilogue(state["x"], state["bias"], state["gamma"], state["residual"])
