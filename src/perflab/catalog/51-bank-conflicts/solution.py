"""bank-conflicts: the reference solution. One extra float per tile row (tile[32][33]): the row
stride becomes 33 words, so tile[tx][k] sits in bank (tx + k) % 32, a different bank for every lane,
and each shared load is one wavefront instead of 32. Same arithmetic in the same order: same result.

The slow version: each block stages a 32x32 fp32 tile of the input in shared memory, then every thread accumulates
ITERS values along one ROW of the tile: lane `tx` reads tile[tx][k] (a row per lane). With a row
stride of 32 floats, tile[tx][k] sits in bank k for every lane: the warp's 32 loads all hit one
bank and are served one after another (a 32-way bank conflict) on every iteration.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state``, ``step(state) -> out`` ([BLOCKS*1024] fp32).
"""
from __future__ import annotations

from perflab.workloads import siblings

_w = siblings.load(__file__, "51-bank-conflicts")   # this puzzle's workload.py: what the fix keeps
make_input, reference, with_kernel = _w.make_input, _w.reference, _w.with_kernel

KERNEL_SRC = r"""
extern "C" __global__ void tile_row_sums(const float* __restrict__ in, float* __restrict__ out, int iters) {
  __shared__ float tile[32][33];                    // padded: row stride 33 words
  const int tx = threadIdx.x, ty = threadIdx.y;   // block 32 x 8
  const size_t base = (size_t)blockIdx.x * 1024;
  for (int r = ty; r < 32; r += 8) tile[r][tx] = in[base + r * 32 + tx];
  __syncthreads();
  float acc = 0.f;
  for (int k = 0; k < iters; ++k) acc += tile[tx][(k + ty) & 31];   // bank (tx + k + ty) % 32
  for (int r = ty; r < 32; r += 8) out[base + r * 32 + tx] = acc + r;
}
"""


def setup(device: str, seed: int) -> dict:
    return with_kernel(device, seed, KERNEL_SRC, "tile_row_sums")   # the workload's input and output, this kernel


step = _w.step   # the same launch as workload.py: only the kernel changed
