"""expert-skew: the reference solution.

Same router, experts, tokens and outputs as workload.py: every token still goes to the expert its
router picks. What changes is where the experts live. At setup the ranks count how many tokens each
expert receives (one all-reduce of the counts) and place the experts greedily, heaviest first, on the
rank with the least load so far (the way DeepSeek's expert-parallel load balancer, EPLB, re-places
experts from measured loads; with more GPUs it also replicates the hottest experts). Each rank then
computes about half of the tokens instead of one rank computing most of them while the other waits
in the combine all-to-all. A capacity factor (dropping tokens over a limit) or an auxiliary
balancing loss would balance too, but they change which expert a token sees.
"""
from __future__ import annotations

from perflab.workloads import siblings

_w = siblings.load(__file__, "77-expert-skew")   # this puzzle's workload.py: what the fix keeps
SIZE, SMOKE_SIZE, build, place, route = _w.SIZE, _w.SMOKE_SIZE, _w.build, _w.place, _w.route
moe_layer = _w.moe_layer


def balanced(loads: list[int], world: int) -> list[int]:
    """Owner rank of every expert: heaviest expert first, each on the least-loaded rank so far."""
    owner, total = [0] * len(loads), [0] * world
    for e in sorted(range(len(loads)), key=lambda e: -loads[e]):
        r = min(range(world), key=lambda r: total[r])
        owner[e] = r
        total[r] += loads[e]
    return owner


def setup(device: str, seed: int) -> dict:
    import torch
    import torch.distributed as dist

    state = build(device, seed)
    loads = torch.bincount(route(state), minlength=state["size"]["experts"])
    if state["world"] > 1:
        dist.all_reduce(loads)                                  # tokens per expert, over every rank
    return place(state, balanced(loads.tolist(), state["world"]))


step = _w.step   # the same MoE layer as workload.py, on this file's placement
