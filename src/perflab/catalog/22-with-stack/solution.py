"""with-stack: the reference solution.

Same weights, inputs and outputs as workload.py. The attention bias depends only on the sequence
length, the head count and the clip distance, not on the input: it is built once in setup(), with
tensor ops instead of a Python double loop over all pairs of positions (either change alone removes
the host time; together the step does no per-step bias work at all).
"""
from __future__ import annotations

from perflab.workloads import siblings

_w = siblings.load(__file__, "22-with-stack")   # this puzzle's workload.py: what the fix keeps
SIZE, SMOKE_SIZE = _w.SIZE, _w.SMOKE_SIZE


def attention_bias(size: dict, device: str):
    """The same [heads, seq, seq] bias as workload.attention_bias, from tensor ops."""
    import torch

    slopes = torch.tensor(_w.alibi_slopes(size["heads"]), dtype=torch.float32, device=device)
    pos = torch.arange(size["seq"], device=device)
    dist = (pos[:, None] - pos[None, :]).abs().clamp(max=size["max_dist"]).to(torch.float32)
    return -slopes[:, None, None] * dist


def setup(device: str, seed: int) -> dict:
    state = _w.build(device, seed)
    state["bias"] = attention_bias(state["size"], state["device"])
    return state


def step(state: dict):
    import torch

    x = _w.next_input(state)
    with torch.no_grad():
        return _w.encode(state, x, state["bias"])
