"""streams-concurrency: the slow workload.

The first half of a mixture-of-experts layer at serving time: 32 experts, each with the 128 tokens
the router sent it (a fixed capacity), each applying its own up-projection with GELU,
y[e] = gelu(x[e] @ W[e]^T), x[e] [128, 8192] bf16, W[e] [4096, 8192] bf16. Every expert's GEMM is one
launch of an in-house Triton kernel (perflab.workloads.expert_gemm; 128 x 256 tiles): 128 tokens x
4096 outputs make 16 thread blocks, for a GPU with 132 SMs. The experts are independent, but the
loop issues them one after the other on the default stream.

``step`` returns ``state["out"]``: [32, 128, 4096] bf16, expert by expert.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> tensor``.
"""
from __future__ import annotations

import math

from perflab.workloads import sizes
from perflab.workloads.expert_gemm import expert_gemm

SIZE = {"experts": 32, "tokens": 128, "dim": 8192, "hidden": 4096}
SMOKE_SIZE = {"experts": 3, "tokens": 8, "dim": 64, "hidden": 32}


def _build(device: str, seed: int) -> dict:
    """The routed tokens per expert, the experts' weights and the output buffer, drawn from ``seed``."""
    import torch

    size = sizes.pick(device, SIZE, SMOKE_SIZE)
    gen = torch.Generator(device=device).manual_seed(int(seed))
    e, t, d, f = size["experts"], size["tokens"], size["dim"], size["hidden"]
    x = torch.randn(e, t, d, generator=gen, device=device).to(torch.bfloat16)
    w = (torch.randn(e, f, d, generator=gen, device=device) / math.sqrt(d)).to(torch.bfloat16)
    return {"size": size, "device": str(device), "x": x, "w": w,
            "out": torch.empty(e, t, f, dtype=torch.bfloat16, device=device)}


def setup(device: str, seed: int) -> dict:
    return _build(device, seed)


def step(state: dict):
    x, w, out = state["x"], state["w"], state["out"]
    for e in range(x.shape[0]):                               # one expert at a time, one stream
        expert_gemm(x, w, out, first=e, gelu=True)
    return out


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("x",)
