"""copy-compute-overlap: the slow workload.

An offline scoring job that already does the copies "right": every step, K=8 micro-batches
x [4096, 4096] bf16 (32 MiB each) wait in pinned host memory, go to the GPU with
``.to(device, non_blocking=True)``, run through a two-layer bf16 MLP y = gelu(x @ W1) @ W2
(hidden 8192; 0.55 TFLOP per micro-batch), and the results go back into a pinned host buffer with
``copy_(..., non_blocking=True)``. At the end of the step the host waits once for everything.

The host data is made once in setup(); every step moves all of it again, both ways. ``step``
returns the host buffer of results [K, 4096, 4096] bf16 (``state["out"]``).

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> tensor``.
"""
from __future__ import annotations

import math

from perflab.workloads import sizes

SIZE = {"batches": 8, "rows": 4096, "dim": 4096, "hidden": 8192}
SMOKE_SIZE = {"batches": 3, "rows": 64, "dim": 32, "hidden": 64}


def _build(device: str, seed: int) -> dict:
    """Weights (on the device), the K input batches and the result buffer in (pinned) host memory."""
    import torch

    size = sizes.pick(device, SIZE, SMOKE_SIZE)
    gen = torch.Generator(device=device).manual_seed(int(seed))
    k, n, d, f = size["batches"], size["rows"], size["dim"], size["hidden"]
    pinned = str(device).startswith("cuda")

    def randn(*shape, std=1.0):
        return (torch.randn(*shape, generator=gen, device=device) * std).to(torch.bfloat16)

    host_x = torch.empty(k, n, d, dtype=torch.bfloat16, pin_memory=pinned)
    for i in range(k):
        host_x[i].copy_(randn(n, d))
    return {"size": size, "device": str(device), "w1": randn(d, f, std=1.0 / math.sqrt(d)),
            "w2": randn(f, d, std=1.0 / math.sqrt(f)), "host_x": host_x,
            "out": torch.empty(k, n, d, dtype=torch.bfloat16, pin_memory=pinned)}


def compute(x, w1, w2, out=None):
    """The model: y = gelu(x @ w1) @ w2."""
    import torch
    import torch.nn.functional as F

    h = F.gelu(x @ w1)
    return torch.matmul(h, w2, out=out) if out is not None else h @ w2


def setup(device: str, seed: int) -> dict:
    return _build(device, seed)


def step(state: dict):
    import torch

    device, w1, w2, out = state["device"], state["w1"], state["w2"], state["out"]
    with torch.no_grad():
        for i, x_host in enumerate(state["host_x"]):
            x = x_host.to(device, non_blocking=True)          # pinned -> device, asynchronous
            y = compute(x, w1, w2)
            out[i].copy_(y, non_blocking=True)                # device -> pinned, asynchronous
    if device.startswith("cuda"):
        torch.cuda.current_stream().synchronize()             # the results are on the host now
    return out


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("host_x",)
