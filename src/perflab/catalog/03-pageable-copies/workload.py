"""pageable-copies: the slow workload.

An offline scoring job. Every step, K=4 micro-batches arrive in host memory (each: features
x [4096, 2048] bf16, a residual r [4096, 2048] bf16 and a per-row scale s [4096] bf16; 32 MiB per
micro-batch), are moved to the GPU with ``.to(device)`` and pushed through a two-layer bf16 MLP,
y = (gelu(x @ W1) @ W2) * s + r (two 137-GFLOP matmuls per micro-batch).

The host data is made once in setup() (a list of K host batches); every step moves all of it
again, as if it had just arrived. ``step`` returns the K outputs stacked: [K, 4096, 2048] bf16.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> tensor``.
"""
from __future__ import annotations

import math

from perflab.workloads import sizes

SIZE = {"batches": 4, "rows": 4096, "dim": 2048, "hidden": 8192}
SMOKE_SIZE = {"batches": 3, "rows": 64, "dim": 32, "hidden": 64}


def _build(device: str, seed: int) -> dict:
    """Weights (on the device) and the K host batches (pageable CPU tensors), from ``seed``."""
    import torch

    size = sizes.pick(device, SIZE, SMOKE_SIZE)
    gen = torch.Generator().manual_seed(int(seed))
    n, d, f = size["rows"], size["dim"], size["hidden"]

    def randn(*shape, std=1.0, dtype=torch.bfloat16):
        return (torch.randn(*shape, generator=gen) * std).to(dtype)

    w1 = randn(d, f, std=1.0 / math.sqrt(d)).to(device)
    w2 = randn(f, d, std=1.0 / math.sqrt(f)).to(device)
    host_batches = [
        (randn(n, d), randn(n, d), (1.0 + 0.1 * torch.randn(n, generator=gen)).to(torch.bfloat16))
        for _ in range(size["batches"])
    ]
    return {"size": size, "w1": w1, "w2": w2, "host_batches": host_batches}


def compute(x, r, s, w1, w2, out=None):
    """The model: y = (gelu(x @ w1) @ w2) * s[:, None] + r."""
    import torch
    import torch.nn.functional as F

    h = F.gelu(x @ w1)
    y = (h @ w2) * s[:, None]
    return torch.add(y, r, out=out) if out is not None else y + r


def setup(device: str, seed: int) -> dict:
    state = _build(device, seed)
    state["device"] = str(device)
    return state


def step(state: dict):
    import torch

    device, w1, w2 = state["device"], state["w1"], state["w2"]
    outs = []
    with torch.no_grad():
        for x_host, r_host, s_host in state["host_batches"]:
            x = x_host.to(device)
            r = r_host.to(device)
            s = s_host.to(device)
            outs.append(compute(x, r, s, w1, w2))
        return torch.stack(outs)


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("host_batches",)  # every host batch (x, r, s)
