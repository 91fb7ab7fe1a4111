"""register-spill: the slow workload.

A polynomial feature expansion: each element x feeds 64 running accumulators over 32 steps
(acc[j] = acc[j] * x + c[j, it]), then a weighted sum. 64 live floats per thread, plus indices and
pointers. Someone asked for "full occupancy" with __launch_bounds__(256, 8): 8 blocks of 256 threads
per SM leaves 65536 / 2048 = 32 registers per thread, so the compiler spills the accumulators to
local memory and every FMA of the inner loop goes through a load and a store.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state``, ``step(state) -> out`` ([N] fp32).
"""
from __future__ import annotations

import numpy as np

from perflab.workloads.cuda_kernels import kernel_state

N, THREADS = 1 << 20, 256

KERNEL_BODY = r"""
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n) return;
  float acc[64];
#pragma unroll
  for (int j = 0; j < 64; ++j) acc[j] = 0.f;
  float x = in[i];
  for (int it = 0; it < 32; ++it) {
#pragma unroll
    for (int j = 0; j < 64; ++j) acc[j] = fmaf(acc[j], x, j * 0.001f + it);
    x = x * 0.999f + 0.001f;
  }
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < 64; ++j) s += acc[j] * (j + 1);
  out[i] = s;
}
"""

KERNEL_SRC = r"""
// TODO: what does this launch bound cost? (ptxas -v, or ncu's Launch Statistics and local memory traffic)
extern "C" __global__ void __launch_bounds__(256, 8)
poly_features(const float* __restrict__ in, float* __restrict__ out, size_t n) {""" + KERNEL_BODY


def make_input(device: str, seed: int):
    import torch

    gen = torch.Generator(device=device).manual_seed(int(seed))  # drawn on the device: fast
    return (torch.rand(N, generator=gen, device=device) - 0.5)


def setup(device: str, seed: int) -> dict:
    return with_kernel(device, seed, KERNEL_SRC, "poly_features")


def with_kernel(device: str, seed: int, source: str, name: str) -> dict:
    """The input, the output and the kernel `name` compiled from `source`."""
    import torch

    x = make_input(device, seed)
    return kernel_state(x, torch.empty_like(x), source, name)


def step(state: dict):
    state["kernel"](((N + THREADS - 1) // THREADS,), (THREADS,), (state["x_cu"], state["out_cu"], np.uint64(N)))
    return state["out"]


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("x",)


def refill(state: dict, seed: int) -> None:
    """New values, drawn as setup draws them (the CuPy view shares the tensor's memory)."""
    from perflab.workloads import fresh

    fresh.redraw(state, make_input, seed, "x")
