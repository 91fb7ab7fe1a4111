"""operator-hotspot: the slow workload.

A scoring model: x [4096, 4096] bf16 goes through 6 bf16 blocks x = gelu(x @ W_i) (W_i [4096, 4096]),
then an output head with 8192 outputs. The head was written "for numerical stability" in fp32:
its weights came from an fp32 checkpoint and were never converted, and the activations are upcast
before it, logits = x.float() @ W_head (W_head [4096, 8192] fp32). ``step`` returns the logits
[4096, 8192] fp32.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> tensor``.
"""
from __future__ import annotations

import math

from perflab.workloads import sizes

SIZE = {"rows": 4096, "dim": 4096, "layers": 6, "classes": 8192}
SMOKE_SIZE = {"rows": 16, "dim": 32, "layers": 2, "classes": 48}


def _build(device: str, seed: int) -> dict:
    """Input, bf16 block weights and the fp32 head, drawn on the device from ``seed``."""
    import torch

    size = sizes.pick(device, SIZE, SMOKE_SIZE)
    gen = torch.Generator(device=device).manual_seed(int(seed))
    n, d, c = size["rows"], size["dim"], size["classes"]

    def randn(*shape, std=1.0):
        return torch.randn(*shape, generator=gen, device=device) * std

    return {"size": size, "device": str(device), "x": randn(n, d).to(torch.bfloat16),
            "blocks": [randn(d, d, std=1.5 / math.sqrt(d)).to(torch.bfloat16) for _ in range(size["layers"])],
            "head": randn(d, c, std=1.0 / math.sqrt(d))}            # fp32, as loaded


def body(x, blocks):
    """The bf16 blocks: x = gelu(x @ W_i)."""
    import torch.nn.functional as F

    for w in blocks:
        x = F.gelu(x @ w)
    return x


def setup(device: str, seed: int) -> dict:
    return _build(device, seed)


def step(state: dict):
    import torch

    with torch.no_grad():
        x = body(state["x"], state["blocks"])
        return x.float() @ state["head"]                           # the fp32 head


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("x",)
