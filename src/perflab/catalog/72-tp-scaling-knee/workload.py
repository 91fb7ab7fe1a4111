"""tp-scaling-knee: the slow workload (tensor-parallel serving of small request batches on N GPUs).

A small residual MLP model (8 blocks of x = x + gelu(rms(x) @ W1) @ W2, hidden 1024, inner 4096,
bf16) served Megatron-style across N GPUs: every rank keeps a column slice of W1 and the matching
row slice of W2, computes a partial block output for every request, and one all-reduce per block
adds the partials up. Each step serves the requests that arrived, 4 per rank's clients (4N in
all), as one batch; every rank returns the rows of its own clients. The forward pass is captured
once per batch size into a CUDA graph (all-reduces included), so the host launches one graph per
step: what remains is GPU time.

``forward(state, x)`` and ``make_batch(state, batch, seed)`` serve any batch the same way (the
batch-size sweep at 1 and N GPUs that scripts/record.py puzzle records into artifacts/sweep.json).

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> tensor``.
Runs under torchrun (perflab.puzzles.evidence.multirank: NCCL on GPUs, gloo on the CPU) and, without a
process group, as one rank (then without CUDA graphs on the CPU).
"""
from __future__ import annotations

from perflab.workloads import sizes
from perflab.workloads.ranks import graphed, rank_and_world

SIZE = {"hidden": 1024, "inner": 4096, "blocks": 8, "per_rank": 4}
SMOKE_SIZE = {"hidden": 64, "inner": 256, "blocks": 3, "per_rank": 4}
SWEEP_BATCHES = [2 ** i for i in range(15)]   # 1 .. 16384 requests per call


def build(device: str, seed: int) -> dict:
    """The full model and this step's requests, the same on every rank (deterministic from seed)."""
    import torch

    size = sizes.pick(device, SIZE, SMOKE_SIZE)
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
    rank, world = state["rank"], state["world"]
    f = state["size"]["inner"]
    cols = slice(rank * f // world, (rank + 1) * f // world)        # this rank's slice of the inner dimension
    state["shards"] = [(w1[:, cols].contiguous().to(device), w2[cols, :].contiguous().to(device))
                       for w1, w2 in state.pop("blocks")]
    return state


def tp_forward(state: dict, x):
    import torch.distributed as dist
    import torch.nn.functional as F

    for w1, w2 in state["shards"]:
        partial = F.gelu(rms(x) @ w1) @ w2               # this rank's share of the block output
        if state["world"] > 1:
            dist.all_reduce(partial)                      # sum of the shares: the block output
        x = x + partial
    return x


def forward(state: dict, x):
    return graphed(state["graphs"], state["device"], lambda inp: tp_forward(state, inp), x)


def make_batch(state: dict, batch: int, seed: int = 0):
    import torch

    device = state["device"]
    gen = torch.Generator(device).manual_seed(int(seed))
    return torch.randn(batch, state["size"]["hidden"], generator=gen, device=device).to(torch.bfloat16)


def step(state: dict):
    import torch

    with torch.no_grad():
        y = forward(state, state["x"])                    # every request, on every rank
        n, r = state["size"]["per_rank"], state["rank"]
        return y[r * n:(r + 1) * n]                       # the rows of this rank's clients


# No input the fix checker can refill (puzzles/engine/guard.py): the solution keeps its own clone of its clients'
# rows (state["mine"]) made in setup, so a refill of state["x"] cannot reach what it serves.
INPUTS = ()
