"""memory-bound (the notes' HBM -> shared-memory bandwidth test): the slow workload.

Stream a 512 MB fp32 buffer from HBM into shared memory and consume it there (a sum, so nothing is
optimized away): the classic "how fast can SMs pull data into SMEM" test. Four blocks of 256
threads per SM; each iteration every thread loads ONE float into the tile, the block synchronizes,
reads the tile, synchronizes again. Each SM has 4 KB in flight at a time: far too little to cover
the DRAM latency, so the test reports a fraction of the HBM bandwidth.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state``, ``step(state) -> total`` ([1] fp64).
"""
from __future__ import annotations

import numpy as np

from perflab.workloads.cuda_kernels import kernel, view

N = 128 << 20          # floats: 512 MB, ten times the L2
THREADS, BLOCKS_PER_SM = 256, 4

BLOCK_TOTAL = r"""
__device__ __forceinline__ void block_total(float acc, double* total) {
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, off);
  __shared__ float warp_sums[32];
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x < 32) {
    float v = threadIdx.x < (blockDim.x >> 5) ? warp_sums[threadIdx.x] : 0.f;
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    if (threadIdx.x == 0) atomicAdd(total, (double)v);
  }
}
"""

KERNEL_SRC = BLOCK_TOTAL + r"""
extern "C" __global__ void hbm_to_smem(const float* __restrict__ in, double* __restrict__ total, long long n) {
  __shared__ float tile[256];                                   // blockDim.x == 256
  float acc = 0.f;
  for (long long base = (long long)blockIdx.x * 256; base < n; base += (long long)gridDim.x * 256) {
    long long i = base + threadIdx.x;
    // TODO: how many bytes does an SM have in flight here, and how many does it need to cover the latency?
    tile[threadIdx.x] = i < n ? in[i] : 0.f;
    __syncthreads();
    acc += tile[255 - threadIdx.x];                             // consume from SMEM
    __syncthreads();
  }
  block_total(acc, total);
}
"""


def make_input(device: str, seed: int):
    import torch

    gen = torch.Generator(device=device).manual_seed(int(seed))  # drawn on the device: fast
    return torch.rand(N, generator=gen, device=device)


def reference(x):
    return x.double().sum().reshape(1)


def sms(device: str) -> int:
    import torch

    return torch.cuda.get_device_properties(device).multi_processor_count


def setup(device: str, seed: int) -> dict:
    return with_kernel(device, seed, KERNEL_SRC, "hbm_to_smem", BLOCKS_PER_SM)


def with_kernel(device: str, seed: int, source: str, name: str, blocks_per_sm: int) -> dict:
    """The input, the fp64 total and the kernel `name` compiled from `source`, a grid of blocks_per_sm per SM."""
    import torch

    x = make_input(device, seed)
    total = torch.zeros(1, dtype=torch.float64, device=device)
    return {"x": x, "total": total, "x_cu": view(x), "total_cu": view(total), "grid": sms(device) * blocks_per_sm,
            "kernel": kernel(source, name)}


def step(state: dict):
    state["total"].zero_()
    state["kernel"]((state["grid"],), (THREADS,), (state["x_cu"], state["total_cu"], np.int64(N)))
    return state["total"]


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("x",)


def refill(state: dict, seed: int) -> None:
    """New values, drawn as setup draws them (the CuPy view shares the tensor's memory)."""
    from perflab.workloads import fresh

    fresh.redraw(state, make_input, seed, "x")
