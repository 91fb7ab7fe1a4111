"""atomic-contention: the slow workload.

Count how many of N routed tokens went to each of 8 experts (an MoE router's load statistics).
One thread per token, one global atomicAdd per token: 32 M atomics land on 8 addresses, which all
live in one or two L2 slices; the atomic units there serialize them while the rest of the GPU waits.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state``, ``step(state) -> counts`` ([8] int32).
"""
from __future__ import annotations

import numpy as np

from perflab.workloads.cuda_kernels import kernel, view

N_TOKENS, EXPERTS, BLOCKS, THREADS = 32 << 20, 8, 1024, 256

KERNEL_SRC = r"""
extern "C" __global__ void expert_counts(const int* __restrict__ expert, unsigned int* __restrict__ counts,
                                         long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    atomicAdd(&counts[expert[i] & 7], 1u);   // TODO: 32 M atomics on 8 words. Count privately, merge once.
}
"""


def make_input(device: str, seed: int):
    import torch

    gen = torch.Generator(device=device).manual_seed(int(seed))  # drawn on the device: fast
    # skewed routing, like a real router: expert e gets weight 1 / (e + 1)
    weights = 1.0 / torch.arange(1, EXPERTS + 1, dtype=torch.float64)
    cdf = (torch.cumsum(weights, 0) / weights.sum()).float().to(device)
    u = torch.rand(N_TOKENS, generator=gen, device=device)
    return torch.searchsorted(cdf, u, right=True).clamp_(max=EXPERTS - 1).to(torch.int32)


def reference(expert):
    import torch

    return torch.bincount(expert.long(), minlength=EXPERTS).to(torch.int32)


def setup(device: str, seed: int) -> dict:
    return with_kernel(device, seed, KERNEL_SRC, "expert_counts")


def with_kernel(device: str, seed: int, source: str, name: str) -> dict:
    """The routed tokens, the counts and the kernel `name` compiled from `source`."""
    import torch

    expert = make_input(device, seed)
    counts = torch.zeros(EXPERTS, dtype=torch.int32, device=device)
    return {"expert": expert, "counts": counts, "expert_cu": view(expert), "counts_cu": view(counts),
            "kernel": kernel(source, name)}


def step(state: dict):
    state["counts"].zero_()
    state["kernel"]((BLOCKS,), (THREADS,), (state["expert_cu"], state["counts_cu"], np.int64(N_TOKENS)))
    return state["counts"]


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("expert",)


def refill(state: dict, seed: int) -> None:
    """New values, drawn as setup draws them (the CuPy view shares the tensor's memory)."""
    from perflab.workloads import fresh

    fresh.redraw(state, make_input, seed, "expert")
