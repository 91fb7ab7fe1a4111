"""energy-precision: the reference solution.

Same requests, same weights, the same block in bf16: the weights are converted to bf16 once, in
setup(); each batch converts its inputs, runs both GEMMs bf16 x bf16 on the tensor cores (cuBLAS
accumulates in fp32) and returns the result as fp32. The fp32 version ran on the FP32 SIMT pipes at
about 50 TFLOP/s; bf16 on the tensor cores is an order of magnitude faster. The GPU draws more power
while it does so, but for so much less time that the joules per inference fall by about as much as
the time: energy = power x time, and the idle-ish floor of an H100's power is paid per second.

The result matches fp32 to bf16 accuracy (relative error of a few 1e-3, checked at 5e-2).
"""
from __future__ import annotations

import math
import os

SIZE = {"batch": 4096, "dim": 4096, "hidden": 8192}
SMOKE_SIZE = {"batch": 8, "dim": 32, "hidden": 64}


def _size(device: str) -> dict:
    if str(device).startswith("cpu") or os.environ.get("PERFLAB_SMOKE", "0") != "0":
        return dict(SMOKE_SIZE)
    return dict(SIZE)


def _build(device: str, seed: int) -> dict:
    """Requests and weights (fp32, on the device), drawn from ``seed``."""
    import torch

    size = _size(device)
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
    import torch

    state = _build(device, seed)
    state["w1_bf16"] = state["w1"].to(torch.bfloat16)                 # once, not per batch
    state["w2_bf16"] = state["w2"].to(torch.bfloat16)
    return state


def step(state: dict):
    import torch

    with torch.no_grad():
        return mlp(state["x"].to(torch.bfloat16), state["w1_bf16"], state["w2_bf16"]).float()
