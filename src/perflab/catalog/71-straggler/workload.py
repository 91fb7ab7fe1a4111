"""straggler: the slow workload (data-parallel batch scoring on N GPUs, one rank also writes the log).

Every rank scores its own shard of a request batch with the same model (4 layers of
x = gelu(x @ W), hidden 4096, bf16, then a 1,000-class head and a softmax) and the ranks add up
their per-class probability totals with one all-reduce (the batch's class histogram). The last rank
also keeps the request log: for each of its requests, one line with the top class and its
confidence, formatted in Python from the probabilities it copies to the host.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> tensor``.
Runs under torchrun (perflab.puzzles.evidence.multirank: NCCL on GPUs, gloo on the CPU) and, without a
process group, as one rank. ``step`` returns the [classes] fp32 totals of the whole batch (the same
on every rank); ``state["log"]`` holds the log lines of the last step on the last rank.
"""
from __future__ import annotations

from perflab.workloads import fresh, sizes
from perflab.workloads.ranks import rank_and_world

SIZE = {"hidden": 4096, "layers": 4, "batch": 16384, "classes": 1000}
SMOKE_SIZE = {"hidden": 64, "layers": 2, "batch": 256, "classes": 10}


def setup(device: str, seed: int) -> dict:
    import torch

    size = sizes.pick(device, SIZE, SMOKE_SIZE)
    rank, world = rank_and_world()
    dtype = torch.bfloat16
    h, c = size["hidden"], size["classes"]
    gen = torch.Generator(device).manual_seed(int(seed))          # the same model on every rank
    weights = [(torch.randn(h, h, generator=gen, device=device) / h ** 0.5).to(device, dtype) for _ in range(size["layers"])]
    head = (torch.randn(h, c, generator=gen, device=device) / h ** 0.5).to(device, dtype)
    shard = torch.Generator(device).manual_seed(int(seed) * 7919 + rank)   # this rank's requests
    x = torch.randn(size["batch"], h, generator=shard, device=device).to(device, dtype)
    return {"size": size, "rank": rank, "world": world, "weights": weights, "head": head, "x": x,
            "out": torch.zeros(c, device=device, dtype=torch.float32), "log": []}


def score(state: dict):
    """Class probabilities [batch, classes] (fp32) of this rank's shard."""
    import torch
    import torch.nn.functional as F

    h = state["x"]
    for w in state["weights"]:
        h = F.gelu(h @ w)
    return torch.softmax((h @ state["head"]).float(), dim=-1)


def write_log(state: dict, probs) -> None:
    """The request log: one line per request of this rank (top class, confidence)."""
    conf, top = probs.max(dim=-1)
    state["log"] = [f"request {i}: class {c} p={p:.4f}" for i, (c, p) in enumerate(zip(top.tolist(), conf.tolist()))]


def step(state: dict):
    import torch
    import torch.distributed as dist

    with torch.no_grad():
        probs = score(state)
        if state["rank"] == state["world"] - 1:
            write_log(state, probs)
        out = state["out"]
        torch.sum(probs, dim=0, out=out)
        if state["world"] > 1:
            dist.all_reduce(out)
        return out


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("x",)


refill = fresh.rank_rows   # new rows for this rank, seeded per rank as setup seeds its own data
