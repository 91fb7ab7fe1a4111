"""low-occupancy: the slow workload.

Row statistics for RMSNorm: out[r] = sum of x[r, :]**2 over 16384 rows of 4096 fp32 values (256 MB), one
block of 64 threads per row. Each thread streams its share of the row in 16-byte loads, one load in flight
at a time, and the block reduces the 64 partial sums in shared memory. The kernel was cut down from a tiled
version that staged 48 KB of the row per block in shared memory; the staging is gone, the buffer is not:
__shared__ float stage[12288] is still declared, and only its first 64 entries are used.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state``, ``step(state) -> out`` ([ROWS] fp32).
"""
from __future__ import annotations

import numpy as np

from perflab.workloads.cuda_kernels import kernel_state

ROWS, COLS, THREADS = 16384, 4096, 64

KERNEL_BODY = r"""
  const float4* row = x + (size_t)blockIdx.x * cols4;
  float acc = 0.f;
#pragma unroll 1
  for (int i = threadIdx.x; i < cols4; i += blockDim.x) {   // one 16-byte load in flight per thread
    float4 v = row[i];
    acc += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
  }
  stage[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) stage[threadIdx.x] += stage[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = stage[0];
}
"""

KERNEL_SRC = r"""
// TODO: how many of these blocks fit on one SM, and how many warps is that? (ncu: Occupancy section,
// launch__occupancy_limit_*, sm__warps_active) Keep the kernel name row_sum_squares.
extern "C" __global__ void row_sum_squares(const float4* __restrict__ x, float* __restrict__ out, int cols4) {
  __shared__ float stage[12288];   // 48 KB, sized for the old tiled version; only blockDim.x entries are used
""" + KERNEL_BODY


def make_input(device: str, seed: int):
    import torch

    gen = torch.Generator(device=device).manual_seed(int(seed))  # drawn on the device: fast
    return torch.rand(ROWS, COLS, generator=gen, device=device) - 0.5


def reference(x):
    """What the kernel computes, in float64 (tests/gpu)."""
    return (x.double() ** 2).sum(dim=1).float()


def setup(device: str, seed: int) -> dict:
    return with_kernel(device, seed, KERNEL_SRC, "row_sum_squares")


def with_kernel(device: str, seed: int, source: str, name: str) -> dict:
    """The input, the output and the kernel `name` compiled from `source`."""
    import torch

    x = make_input(device, seed)
    return kernel_state(x, torch.empty(ROWS, device=device), source, name)


def step(state: dict):
    state["kernel"]((ROWS,), (THREADS,), (state["x_cu"], state["out_cu"], np.int32(COLS // 4)))
    return state["out"]


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("x",)


def refill(state: dict, seed: int) -> None:
    """New values, drawn as setup draws them (the CuPy view shares the tensor's memory)."""
    from perflab.workloads import fresh

    fresh.redraw(state, make_input, seed, "x")
