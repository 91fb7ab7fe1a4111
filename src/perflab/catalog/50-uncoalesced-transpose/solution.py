"""uncoalesced-access: the reference solution.

A tiled transpose: each 32x8 block loads a 32x32 tile with coalesced row reads into shared memory,
then writes it out with coalesced row writes of the transpose. The tile is padded to 32x33 floats so
that reading it by column does not put a warp's 32 lanes in one bank (that would trade the
uncoalesced global loads for 32-way shared-memory bank conflicts).
"""
from __future__ import annotations

import numpy as np

from perflab.workloads.cuda_kernels import kernel_state

ROWS, COLS = 4096, 8192
TILE = 32

KERNEL_SRC = r"""
extern "C" __global__ void transpose_scale_tiled(const float* __restrict__ in, float* __restrict__ out,
                                                 int rows, int cols) {
  __shared__ float tile[32][33];                 // +1 column: conflict-free column reads
  const int c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
  const int tx = threadIdx.x, ty = threadIdx.y;  // block 32 x 8
  for (int j = ty; j < 32; j += 8) {
    int r = r0 + j, c = c0 + tx;
    if (r < rows && c < cols) tile[j][tx] = in[(size_t)r * cols + c];        // coalesced read of a row
  }
  __syncthreads();
  for (int j = ty; j < 32; j += 8) {
    int c = c0 + j, r = r0 + tx;                                               // out[c][r] = 2 in[r][c]
    if (r < rows && c < cols) out[(size_t)c * rows + r] = 2.f * tile[tx][j];  // coalesced write of a row
  }
}
"""


def setup(device: str, seed: int) -> dict:
    import torch

    gen = torch.Generator(device=device).manual_seed(int(seed))  # drawn on the device: fast
    x = (torch.rand(ROWS, COLS, generator=gen, device=device) - 0.5)
    out = torch.empty(COLS, ROWS, device=device)
    return kernel_state(x, out, KERNEL_SRC, "transpose_scale_tiled")


def step(state: dict):
    grid = ((COLS + TILE - 1) // TILE, (ROWS + TILE - 1) // TILE)
    state["kernel"](grid, (TILE, 8), (state["x_cu"], state["out_cu"], np.int32(ROWS), np.int32(COLS)))
    return state["out"]
