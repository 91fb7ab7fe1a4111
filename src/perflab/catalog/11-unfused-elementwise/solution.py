"""unfused-elementwise: the reference solution.

Same inputs, same formula as workload.py. On a GPU the epilogue is compiled with torch.compile:
TorchInductor fuses the whole chain of elementwise ops into one generated Triton kernel that reads
x, residual, bias and gamma once and writes y once (about 3 x 256 MiB of HBM traffic instead of
about 25 x 256 MiB). The compiled function is built once in setup(). On the CPU it runs eagerly.

(A hand-written Triton kernel does the same; torch.compile writes it for you.)
"""
from __future__ import annotations

import math
import os

SIZE = {"rows": 16384, "dim": 4096}
SMOKE_SIZE = {"rows": 64, "dim": 32}
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _size(device: str) -> dict:
    if str(device).startswith("cpu") or os.environ.get("PERFLAB_SMOKE", "0") != "0":
        return dict(SMOKE_SIZE)
    return dict(SIZE)


def _build(device: str, seed: int) -> dict:
    """Activation, residual and the per-channel bias and scale, drawn on the device from ``seed``."""
    import torch

    size = _size(device)
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
    import torch

    state = _build(device, seed)
    if str(device).startswith("cuda"):
        # one fused kernel for the whole chain; static shapes, the whole function in one graph
        state["fused"] = torch.compile(epilogue, fullgraph=True, dynamic=False)
    else:
        state["fused"] = epilogue
    return state


def step(state: dict):
    import torch

    with torch.no_grad():
        return state["fused"](state["x"], state["bias"], state["gamma"], state["residual"])
