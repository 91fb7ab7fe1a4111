"""expert-skew: the slow workload (an expert-parallel MoE layer on N GPUs whose router favours some experts).

One mixture-of-experts layer: 8 experts (FFN 4096 -> 16384 -> 4096, gelu, bf16), top-1 routing by a
learned router whose bias favours experts 4-7 (most tokens pick one of them). Expert parallelism:
rank r holds the experts PLACEMENT assigns to it (here the contiguous split: experts 0-3 on rank 0,
4-7 on rank 1). Each rank routes its own 8,192 tokens, sends every token to the rank of its expert
(all-to-all: dispatch), runs its experts on the tokens it received (one GEMM pair per expert, tokens
grouped by expert, in the order they arrived), and sends the results back (all-to-all: combine).

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> tensor``.
Runs under torchrun (perflab.puzzles.evidence.multirank: NCCL on GPUs, gloo on the CPU) and, without a
process group, as one rank holding every expert. ``step`` returns this rank's tokens' layer output
([tokens, hidden], bf16, in the tokens' order).
"""
from __future__ import annotations

from perflab.workloads import fresh, sizes
from perflab.workloads.ranks import rank_and_world

SIZE = {"hidden": 4096, "inner": 16384, "experts": 8, "tokens": 8192}
SMOKE_SIZE = {"hidden": 32, "inner": 64, "experts": 8, "tokens": 256}
ROUTER_BIAS = [0.0, 0.0, 0.0, 0.0, 1.6, 1.6, 1.1, 1.1]   # the router learned to favour experts 4-7


def contiguous(experts: int, world: int) -> list[int]:
    """The owner rank of every expert: experts split into contiguous ranges, one per rank."""
    return [e * world // experts for e in range(experts)]


def build(device: str, seed: int) -> dict:
    """Router, every expert's weights (the same on every rank) and this rank's tokens."""
    import torch

    size = sizes.pick(device, SIZE, SMOKE_SIZE)
    rank, world = rank_and_world()
    h, f, n = size["hidden"], size["inner"], size["experts"]
    dtype = torch.bfloat16
    gen = torch.Generator(device).manual_seed(int(seed))
    router = (torch.randn(h, n, generator=gen, device=device) / h ** 0.5)
    bias = torch.tensor(ROUTER_BIAS[:n], device=device)
    experts = [((torch.randn(h, f, generator=gen, device=device) / h ** 0.5).to(dtype),
                (torch.randn(f, h, generator=gen, device=device) / f ** 0.5).to(dtype)) for _ in range(n)]
    shard = torch.Generator(device).manual_seed(int(seed) * 7919 + rank)   # this rank's tokens
    x = torch.randn(size["tokens"], h, generator=shard, device=device).to(dtype)
    return {"size": size, "rank": rank, "world": world, "device": str(device), "router": router, "bias": bias,
            "all_experts": experts, "x": x}


def place(state: dict, owner: list[int]) -> dict:
    """Keep the weights of the experts this rank owns; remember every expert's owner."""
    import torch

    state["owner"] = torch.tensor(owner, device=state["device"])
    state["experts"] = {e: w for e, w in enumerate(state.pop("all_experts")) if owner[e] == state["rank"]}
    return state


def setup(device: str, seed: int) -> dict:
    state = build(device, seed)
    return place(state, contiguous(state["size"]["experts"], state["world"]))


def route(state: dict):
    """Top-1 expert of every token of this rank."""
    logits = state["x"].float() @ state["router"] + state["bias"]
    return logits.argmax(dim=-1)


def exchange(state: dict, t, send_counts: list[int], recv_counts: list[int]):
    """all-to-all of rows: send_counts[r] rows of t (in order) to rank r; returns the rows received."""
    import torch
    import torch.distributed as dist

    if state["world"] == 1:
        return t
    out = torch.empty((sum(recv_counts), *t.shape[1:]), device=t.device, dtype=t.dtype)
    dist.all_to_all_single(out, t.contiguous(), output_split_sizes=recv_counts, input_split_sizes=send_counts)
    return out


def run_experts(state: dict, tokens, expert_ids):
    """Every received token through its expert (the local ones), grouped by expert in arrival order."""
    import torch
    import torch.nn.functional as F

    order = torch.argsort(expert_ids, stable=True)
    counts = torch.bincount(expert_ids, minlength=state["size"]["experts"]).tolist()
    grouped = tokens[order]
    out = torch.empty_like(grouped)
    start = 0
    for e, c in enumerate(counts):
        if c:
            w1, w2 = state["experts"][e]
            out[start:start + c] = F.gelu(grouped[start:start + c] @ w1) @ w2
        start += c
    result = torch.empty_like(out)
    result[order] = out
    return result


def moe_layer(state: dict):
    import torch
    import torch.distributed as dist

    world = state["world"]
    expert = route(state)
    dest = state["owner"][expert]
    order = torch.argsort(dest, stable=True)                        # tokens grouped by destination rank
    send = torch.bincount(dest, minlength=world)
    recv = torch.empty_like(send)
    if world > 1:
        dist.all_to_all_single(recv, send)                           # how many tokens each rank will get
    else:
        recv.copy_(send)
    send_counts, recv_counts = send.tolist(), recv.tolist()
    tokens = exchange(state, state["x"][order], send_counts, recv_counts)        # dispatch
    ids = exchange(state, expert[order], send_counts, recv_counts)
    y = run_experts(state, tokens, ids)
    back = exchange(state, y, recv_counts, send_counts)                           # combine
    out = torch.empty_like(back)
    out[order] = back
    return out


def step(state: dict):
    import torch

    with torch.no_grad():
        return moe_layer(state)


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("x",)


refill = fresh.rank_rows   # new rows for this rank, seeded per rank as setup seeds its own data
