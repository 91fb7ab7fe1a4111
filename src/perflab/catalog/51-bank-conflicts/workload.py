"""bank-conflicts: the slow workload.

Each block stages a 32x32 fp32 tile of the input in shared memory, then every thread accumulates
ITERS values along one ROW of the tile: lane `tx` reads tile[tx][k] (a row per lane). With a row
stride of 32 floats, tile[tx][k] sits in bank k for every lane: the warp's 32 loads all hit one
bank and are served one after another (a 32-way bank conflict) on every iteration.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state``, ``step(state) -> out`` ([BLOCKS*1024] fp32).
"""
from __future__ import annotations

import numpy as np

from perflab.workloads.cuda_kernels import kernel_state

BLOCKS, ITERS = 4096, 256

KERNEL_SRC = r"""
extern "C" __global__ void tile_row_sums(const float* __restrict__ in, float* __restrict__ out, int iters) {
  __shared__ float tile[32][32];   // TODO: lane tx reads row tx: which bank does tile[tx][k] fall in?
  const int tx = threadIdx.x, ty = threadIdx.y;   // block 32 x 8
  const size_t base = (size_t)blockIdx.x * 1024;
  for (int r = ty; r < 32; r += 8) tile[r][tx] = in[base + r * 32 + tx];
  __syncthreads();
  float acc = 0.f;
  for (int k = 0; k < iters; ++k) acc += tile[tx][(k + ty) & 31];   // lane tx: row tx -> same bank
  for (int r = ty; r < 32; r += 8) out[base + r * 32 + tx] = acc + r;
}
"""


def make_input(device: str, seed: int):
    import torch

    gen = torch.Generator(device=device).manual_seed(int(seed))  # drawn on the device: fast
    return (torch.rand(BLOCKS * 1024, generator=gen, device=device) - 0.5)


def reference(x):
    """What every variant computes (torch, float64 then rounded; the GPU tests compare with a tolerance)."""
    import torch

    t = x.double().view(BLOCKS, 32, 32)                        # [block, row, col]
    ty = torch.arange(8, device=x.device)
    k = torch.arange(ITERS, device=x.device)
    cols = (k[None, :] + ty[:, None]) & 31                     # [ty, k]
    counts = torch.zeros(8, 32, dtype=torch.float64, device=x.device)
    counts.scatter_add_(1, cols, torch.ones_like(cols, dtype=torch.float64))
    acc = torch.einsum("btc,yc->byt", t, counts)               # [block, ty, tx]
    r = torch.arange(32, device=x.device)
    out = acc[:, r % 8, :] + r[None, :, None]                  # row r is written by ty = r % 8
    return out.reshape(-1).float()


def setup(device: str, seed: int) -> dict:
    return with_kernel(device, seed, KERNEL_SRC, "tile_row_sums")


def with_kernel(device: str, seed: int, source: str, name: str) -> dict:
    """The input, the output and the kernel `name` compiled from `source`."""
    import torch

    x = make_input(device, seed)
    return kernel_state(x, torch.empty_like(x), source, name)


def step(state: dict):
    state["kernel"]((BLOCKS,), (32, 8), (state["x_cu"], state["out_cu"], np.int32(ITERS)))
    return state["out"]


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("x",)


def refill(state: dict, seed: int) -> None:
    """New values, drawn as setup draws them (the CuPy view shares the tensor's memory)."""
    from perflab.workloads import fresh

    fresh.redraw(state, make_input, seed, "x")
