"""ring-attention: the slow workload (context-parallel attention over N GPUs, KV blocks passed around a ring).

A long sequence (2 x 2,048 tokens per rank, 16 heads of 128, bf16) is split across N ranks by
position: every rank holds the queries, keys and values of its own 2,048 positions, for 4 attention
layers (no mask: every position attends to every other). Ring attention: each rank attends its
queries to the KV block it holds, passes that block to the next rank and receives the previous
rank's, and repeats until it has seen every block; the partial results are merged exactly with their
log-sum-exp (the flash-attention rescaling). Here every transfer waits for the block computation
before it, and the next block computation waits for the transfer.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> tuple``.
Runs under torchrun (perflab.puzzles.evidence.multirank: NCCL on GPUs, gloo on the CPU) and, without a
process group, as one rank holding the whole (shorter) sequence. ``step`` returns, per layer, the
attention output of this rank's positions ([batch, heads, positions, head_dim], bf16).
"""
from __future__ import annotations

from perflab.workloads import sizes
from perflab.workloads.ranks import rank_and_world

SIZE = {"batch": 2, "heads": 16, "positions": 2048, "head_dim": 128, "layers": 4}
SMOKE_SIZE = {"batch": 1, "heads": 2, "positions": 16, "head_dim": 16, "layers": 2}


def setup(device: str, seed: int) -> dict:
    import torch

    size = sizes.pick(device, SIZE, SMOKE_SIZE)
    rank, world = rank_and_world()
    shape = (size["batch"], size["heads"], size["positions"], size["head_dim"])
    gen = torch.Generator(device).manual_seed(int(seed) * 7919 + rank)   # this rank's positions
    layers = []
    for _ in range(size["layers"]):
        q = torch.randn(shape, generator=gen, device=device).to(torch.bfloat16)
        kv = torch.randn((2, *shape), generator=gen, device=device).to(torch.bfloat16)   # keys and values, one block
        layers.append((q, kv))
    return {"size": size, "rank": rank, "world": world, "device": str(device), "layers": layers,
            "recv": [torch.empty_like(layers[0][1]) for _ in range(2)]}


def attend(q, kv):
    """Attention of q to one KV block: (output [B, H, S, D] bf16, log-sum-exp [B, H, S] fp32)."""
    import torch

    k, v = kv[0], kv[1]
    if q.is_cuda:
        out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, False, False)
    else:
        out = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, False)
    return out[0], out[1]


def merge(acc, part):
    """Two partial attentions of the same queries over disjoint KV blocks -> the attention over both."""
    import torch

    if acc is None:
        return part[0].float(), part[1]
    (o1, l1), (o2, l2) = acc, part
    lse = torch.logaddexp(l1, l2)
    return o1 * torch.exp(l1 - lse).unsqueeze(-1) + o2.float() * torch.exp(l2 - lse).unsqueeze(-1), lse


def start_exchange(state: dict, kv, into):
    """Send kv to the next rank and receive the previous rank's block into `into` (asynchronous)."""
    import torch.distributed as dist

    rank, world = state["rank"], state["world"]
    ops = [dist.P2POp(dist.isend, kv, (rank + 1) % world), dist.P2POp(dist.irecv, into, (rank - 1) % world)]
    return dist.batch_isend_irecv(ops)


def step(state: dict):
    outs = []
    for q, kv in state["layers"]:
        acc = None
        for i in range(state["world"]):
            acc = merge(acc, attend(q, kv))                  # this block first ...
            if i + 1 < state["world"]:
                into = state["recv"][i % 2]
                for req in start_exchange(state, kv, into):  # ... then the transfer of the next one
                    req.wait()
                kv = into
        outs.append(acc[0].to(q.dtype))
    return tuple(outs)


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("layers",)  # the queries, keys and values (activations, not weights)


def refill(state: dict, seed: int) -> None:
    """New queries, keys and values for this rank's positions (its own data, as setup seeds it per rank)."""
    from perflab.workloads import fresh

    base = (int(seed) * 7919 + state["rank"]) * 97
    for i, (q, kv) in enumerate(state["layers"]):
        fresh.randn_(q, base + 2 * i)
        fresh.randn_(kv, base + 2 * i + 1)
