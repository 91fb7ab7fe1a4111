"""recompilation: the reference solution.

Same weights, batches and outputs as workload.py. The block is compiled once for every length: the sequence
dimension is marked dynamic, so Dynamo guards on its range instead of its value and Inductor generates kernels that
take the length as an argument. The first call compiles; every later batch, whatever its length, reuses that code.
"""
from __future__ import annotations

from perflab.workloads import siblings

_w = siblings.load(__file__, "29-recompilation")   # this puzzle's workload.py: what the fix keeps
SIZE, SMOKE_SIZE = _w.SIZE, _w.SMOKE_SIZE


def setup(device: str, seed: int) -> dict:
    import torch

    state = _w.build(device, seed)
    state["encode"] = torch.compile(_w.block, dynamic=True, backend=_w.backend(device))
    return state


def step(state: dict):
    import torch

    x = _w.next_batch(state)
    torch._dynamo.mark_dynamic(x, 1)
    with torch.no_grad():
        return state["encode"](state["params"], x)
