"""batch-size-knee: the reference solution.

Same model, same requests, same outputs (up to fp32 rounding: a batched GEMM adds in another order
than a GEMV). The N waiting requests are served in batches of BATCH=1024 instead of one by one.

Why 1024: the batch-size sweep (artifacts/sweep.json and sweep.png, recorded on the H100) shows
the time of one forward pass flat while the GPU waits on the host to launch kernels, then rising
once the GEMMs are big enough to keep the GPU busy. Throughput grows with the batch and levels
off; 1024 is the knee there, the smallest batch with at least 80 % of the best throughput. Past it
a larger batch mostly adds latency. At 1024 each forward keeps the GPU busy several times longer
than the host needs to launch it, so the GPU never waits for the host.
"""
from __future__ import annotations

import math
import os

SIZE = {"requests": 2048, "dim": 1024, "hidden": 4096}
SMOKE_SIZE = {"requests": 24, "dim": 32, "hidden": 64}


def _size(device: str) -> dict:
    if str(device).startswith("cpu") or os.environ.get("PERFLAB_SMOKE", "0") != "0":
        return dict(SMOKE_SIZE)
    return dict(SIZE)


def _build(device: str, seed: int) -> dict:
    """Weights and the N waiting requests, drawn on the device from ``seed``."""
    import torch

    size = _size(device)
    gen = torch.Generator(device=device).manual_seed(int(seed))
    d, f = size["dim"], size["hidden"]

    def randn(*shape, std=1.0):
        return torch.randn(*shape, generator=gen, device=device) * std

    return {"size": size, "device": str(device),
            "w1": randn(f, d, std=1.0 / math.sqrt(d)), "b1": randn(f, std=0.1),
            "w2": randn(d, f, std=1.0 / math.sqrt(f)), "b2": randn(d, std=0.1),
            "requests": randn(size["requests"], d)}


def forward(state: dict, x):
    """The model on a batch x [B, dim] fp32 -> [B, dim] fp32."""
    import torch.nn.functional as F

    return F.linear(F.gelu(F.linear(x, state["w1"], state["b1"])), state["w2"], state["b2"])


def make_batch(state: dict, batch: int, seed: int = 0):
    """A random batch [batch, dim] fp32 on the state's device (for the batch-size sweep)."""
    import torch

    gen = torch.Generator(device=state["device"]).manual_seed(int(seed))
    return torch.randn(batch, state["size"]["dim"], generator=gen, device=state["device"])


def setup(device: str, seed: int) -> dict:
    return _build(device, seed)


BATCH = 1024
SMOKE_BATCH = 8


def step(state: dict):
    import torch

    batch = SMOKE_BATCH if state["size"] == SMOKE_SIZE else BATCH
    with torch.no_grad():
        outs = [forward(state, x) for x in state["requests"].split(batch)]   # BATCH requests at a time
        return torch.cat(outs)
