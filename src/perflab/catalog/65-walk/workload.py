"""walk: the slow workload (the start of the walk).

A feed-forward projection and its epilogue: y = epilogue(x @ w) for x [4096, 4096] and w [4096, 4096] in
fp32, where the epilogue is bias, the tanh approximation of GELU, a per-channel scale and a residual. The
epilogue was written for rows that arrive a few at a time, so it still runs over row blocks of 16: a Python
loop of 256 blocks, each a handful of tiny tensor ops, every one its own kernel launch. The matmul runs
in full fp32 (`torch.set_float32_matmul_precision("highest")`), the epilogue one tensor op at a time.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state``, ``step(state) -> y`` ([4096, 4096] fp32).
"""
from __future__ import annotations

import math
from contextlib import contextmanager

from perflab.workloads import siblings, sizes

SIZE = {"rows": 4096, "dim": 4096, "block": 16}
SMOKE_SIZE = {"rows": 64, "dim": 32, "block": 4}


def setup(device: str, seed: int) -> dict:
    """Activation, weight, residual, per-channel bias and scale, drawn on the device from ``seed``."""
    import torch

    size = sizes.pick(device, SIZE, SMOKE_SIZE)
    gen = torch.Generator(device=device).manual_seed(int(seed))
    n, d = size["rows"], size["dim"]

    def randn(*shape, std=1.0):
        return torch.randn(*shape, generator=gen, device=device) * std

    return {"size": size, "x": randn(n, d), "w": randn(d, d, std=1.0 / math.sqrt(d)), "residual": randn(n, d),
            "bias": randn(d, std=0.1), "gamma": 1.0 + randn(d, std=0.1)}


@contextmanager
def matmul_precision(precision: str):
    """fp32 matmuls at `precision` ("highest": FP32 FFMA; "high": TF32 tensor cores) inside the block only:
    the checker runs the slow workload and the fix in one process."""
    import torch

    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)


# bias + tanh-GELU + scale + residual, one tensor op (one kernel) at a time, as 11-unfused-elementwise writes it:
#   h = x + bias;  g = 0.5 * h * (1 + tanh(sqrt(2/pi) * (h + 0.044715 * h^3)));  return g * gamma + residual
epilogue = siblings.load(None, "11-unfused-elementwise").epilogue


def project(state: dict, precision: str = "highest"):
    with matmul_precision(precision):
        return state["x"] @ state["w"]


def step(state: dict):
    import torch

    h = project(state)
    block = state["size"]["block"]
    out = torch.empty_like(h)
    for r in range(0, h.shape[0], block):   # TODO: the whole tensor at once
        out[r:r + block] = epilogue(h[r:r + block], state["bias"], state["gamma"], state["residual"][r:r + block])
    return out


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("x", "residual")  # w, bias, gamma are weights
