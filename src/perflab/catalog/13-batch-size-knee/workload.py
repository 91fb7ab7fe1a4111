"""batch-size-knee: the slow workload.

A small scoring model served one request at a time. The model is a two-layer fp32 MLP,
y = W2 gelu(W1 x + b1) + b2 (1024 -> 4096 -> 1024, 8.4 M parameters). Every step, N=2048 requests
are waiting (``state["requests"]`` [N, 1024] fp32); the server runs the model on each of them
separately (batch size 1) and returns all N outputs [N, 1024] fp32.

``forward(state, x)`` runs the model on a batch x [B, 1024]; ``make_batch(state, batch, seed)``
builds a random batch of any size (scripts/record.py batch-sweep uses both for the sweep).

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> tensor``.
"""
from __future__ import annotations

import math

from perflab.workloads import sizes

SIZE = {"requests": 2048, "dim": 1024, "hidden": 4096}
SMOKE_SIZE = {"requests": 24, "dim": 32, "hidden": 64}


def _build(device: str, seed: int) -> dict:
    """Weights and the N waiting requests, drawn on the device from ``seed``."""
    import torch

    size = sizes.pick(device, SIZE, SMOKE_SIZE)
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


def step(state: dict):
    import torch

    with torch.no_grad():
        outs = [forward(state, x) for x in state["requests"].split(1)]   # one request at a time
        return torch.cat(outs)


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("requests",)
