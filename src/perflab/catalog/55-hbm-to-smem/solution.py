"""memory-bound (the notes' HBM -> shared-memory bandwidth test): the reference solution.

More bytes in flight per SM: 16-byte (float4) loads, four of them per thread before the block
synchronizes (64 B per thread, 16 KB per block), and eight blocks per SM: 128 KB in flight per SM
instead of 4 KB. Same data into shared memory, same sum (in another order: fp64 total, rtol 1e-5).

The slow version: see workload.py's docstring.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state``, ``step(state) -> total`` ([1] fp64).
"""
from __future__ import annotations

import numpy as np

from perflab.workloads import siblings

_w = siblings.load(__file__, "55-hbm-to-smem")   # this puzzle's workload.py: what the fix keeps
N, BLOCK_TOTAL, make_input, reference, sms, with_kernel = (_w.N, _w.BLOCK_TOTAL, _w.make_input, _w.reference, _w.sms,
                                                         _w.with_kernel)

THREADS, BLOCKS_PER_SM = 256, 8


KERNEL_SRC = BLOCK_TOTAL + r"""
extern "C" __global__ void hbm_to_smem_vec4(const float4* __restrict__ in, double* __restrict__ total, long long n4) {
  __shared__ float4 tile[4][256];                               // 16 KB; blockDim.x == 256
  float acc = 0.f;
  for (long long base = (long long)blockIdx.x * 1024; base < n4; base += (long long)gridDim.x * 1024) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {                                // 4 x 16 B loads in flight per thread
      long long i = base + j * 256 + threadIdx.x;
      tile[j][threadIdx.x] = i < n4 ? in[i] : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float4 v = tile[3 - j][255 - threadIdx.x];
      acc += (v.x + v.y) + (v.z + v.w);
    }
    __syncthreads();
  }
  block_total(acc, total);
}
"""


def setup(device: str, seed: int) -> dict:
    return with_kernel(device, seed, KERNEL_SRC, "hbm_to_smem_vec4", BLOCKS_PER_SM)   # the workload's input, this kernel


def step(state: dict):
    state["total"].zero_()
    state["kernel"]((state["grid"],), (THREADS,), (state["x_cu"], state["total_cu"], np.int64(N // 4)))
    return state["total"]
