"""tp-scaling-knee: the reference solution.

Same model, requests and outputs as workload.py. At 4 requests per rank, splitting every block
across the GPUs costs more (one all-reduce per block, a fixed latency each) than it saves (half the
weight reads of a small model). So the GPUs serve as independent replicas: every rank holds the
whole model and runs only its own clients' 4 requests, with no communication at all (one CUDA graph
per step, as before). Tensor parallelism pays only past the knee of the sweep.
"""
from __future__ import annotations

import os

from perflab.workloads.ranks import graphed, rank_and_world

SIZE = {"hidden": 1024, "inner": 4096, "blocks": 8, "per_rank": 4}
SMOKE_SIZE = {"hidden": 64, "inner": 256, "blocks": 3, "per_rank": 4}


def _size(device: str) -> dict:
    if str(device).startswith("cpu") or os.environ.get("PERFLAB_SMOKE", "0") != "0":
        return dict(SMOKE_SIZE)
    return dict(SIZE)


def build(device: str, seed: int) -> dict:
    """The full model and this step's requests, the same on every rank (deterministic from seed)."""
    import torch

    size = _size(device)
    h, f = size["hidden"], size["inner"]
    gen = torch.Generator(device).manual_seed(int(seed))
    blocks = [((torch.randn(h, f, generator=gen, device=device) / h ** 0.5).to(torch.bfloat16),
               (torch.randn(f, h, generator=gen, device=device) / f ** 0.5).to(torch.bfloat16)) for _ in range(size["blocks"])]
    rank, world = rank_and_world()
    x = torch.randn(size["per_rank"] * world, h, generator=gen, device=device).to(device, torch.bfloat16)
    return {"size": size, "rank": rank, "world": world, "device": str(device), "blocks": blocks, "x": x,
            "graphs": {}}


def rms(x):
    import torch

    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(dim=-1, keepdim=True) + 1e-6)).to(x.dtype)


def setup(device: str, seed: int) -> dict:
    state = build(device, seed)
    n, r = state["size"]["per_rank"], state["rank"]
    state["blocks"] = [(w1.to(device), w2.to(device)) for w1, w2 in state["blocks"]]   # a whole replica
    state["mine"] = state["x"][r * n:(r + 1) * n].clone()                            # my clients' requests
    return state


def replica_forward(state: dict, x):
    import torch.nn.functional as F

    for w1, w2 in state["blocks"]:
        x = x + F.gelu(rms(x) @ w1) @ w2
    return x


def step(state: dict):
    import torch

    with torch.no_grad():
        return graphed(state["graphs"], state["device"], lambda inp: replica_forward(state, inp), state["mine"])
