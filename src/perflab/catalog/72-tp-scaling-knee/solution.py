"""tp-scaling-knee: the reference solution.

Same model, requests and outputs as workload.py. At 4 requests per rank, splitting every block
across the GPUs costs more (one all-reduce per block, a fixed latency each) than it saves (half the
weight reads of a small model). So the GPUs serve as independent replicas: every rank holds the
whole model and runs only its own clients' 4 requests, with no communication at all (one CUDA graph
per step, as before). Tensor parallelism pays only past the knee of the sweep.
"""
from __future__ import annotations

from perflab.workloads import siblings
from perflab.workloads.ranks import graphed

_w = siblings.load(__file__, "72-tp-scaling-knee")   # this puzzle's workload.py: what the fix keeps
SIZE, SMOKE_SIZE, build, rms = _w.SIZE, _w.SMOKE_SIZE, _w.build, _w.rms


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
