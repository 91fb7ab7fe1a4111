"""roofline practice: the reference solution. Three kernels unchanged; the GEMV fixed.

The roofline of the slow step puts the GEMV (rl_scores, 0.5 FLOP per byte: memory-bound) far below the
DRAM roof while the GEMM, the elementwise and the reduction sit near their roofs. Its loads were the
problem: one thread per item, so a warp's 32 lanes read 32 rows 2 KB apart. Here one warp takes one
item: its lanes read the item's 2 KB row contiguously with 16-byte loads (float4), multiply with the
query and reduce with shuffles. The kernel reads the 512 MB table at close to DRAM speed.
"""
from __future__ import annotations

import numpy as np

from perflab.workloads import siblings
from perflab.workloads.cuda_kernels import kernel, view

_w = siblings.load(__file__, "62-roofline-practice")   # this puzzle's workload.py: what the fix keeps
make_inputs = _w.make_inputs

M, K, N = 4096, 1024, 4096           # the GEMM and the [M, N] activations
ITEMS, DIM = 256 * 1024, 512         # the embedding table E [ITEMS, DIM] fp32 (512 MB)

KERNEL_SRC = r"""
__device__ __forceinline__ float bf16_lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ unsigned to_bf16(float f) {        // round to nearest even (finite values)
  unsigned u = __float_as_uint(f);
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}
__device__ __forceinline__ float gelu_sigmoid(float x) {  // x * sigmoid(1.702 x): GELU's sigmoid form
  return __fdividef(x, 1.f + __expf(-1.702f * x));
}

extern "C" __global__ void rl_gelu(const uint4* __restrict__ h, uint4* __restrict__ g, long long n8) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;     // 8 bf16 per thread, 16-byte accesses
  if (i >= n8) return;
  uint4 v = h[i];
  unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int j = 0; j < 4; ++j)
    w[j] = to_bf16(gelu_sigmoid(bf16_lo(w[j]))) | (to_bf16(gelu_sigmoid(bf16_hi(w[j]))) << 16);
  g[i] = make_uint4(w[0], w[1], w[2], w[3]);
}

extern "C" __global__ void rl_rowsumsq(const uint4* __restrict__ g, float* __restrict__ s, int cols8) {
  __shared__ float warp_sums[32];
  const uint4* row = g + (size_t)blockIdx.x * cols8;                 // one block per row
  float acc = 0.f;
  for (int i = threadIdx.x; i < cols8; i += blockDim.x) {
    uint4 v = row[i];
    unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float lo = bf16_lo(w[j]), hi = bf16_hi(w[j]);
      acc = fmaf(lo, lo, acc);
      acc = fmaf(hi, hi, acc);
    }
  }
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.f;
    for (int w = 0; w < (int)(blockDim.x >> 5); ++w) total += warp_sums[w];
    s[blockIdx.x] = total;
  }
}

extern "C" __global__ void rl_scores_warp(const float4* __restrict__ E, const float4* __restrict__ q,
                                          float* __restrict__ out, int items, int dim4) {
  int item = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;   // a warp per item
  if (item >= items) return;
  const float4* row = E + (size_t)item * dim4;                       // lanes: one contiguous 2 KB row
  float acc = 0.f;
#pragma unroll 4
  for (int k = lane; k < dim4; k += 32) {
    float4 a = row[k], b = q[k];
    acc = fmaf(a.x, b.x, acc); acc = fmaf(a.y, b.y, acc); acc = fmaf(a.z, b.z, acc); acc = fmaf(a.w, b.w, acc);
  }
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
  if (lane == 0) out[item] = acc;
}
"""


def setup(device: str, seed: int) -> dict:
    import torch

    st = make_inputs(device, seed)
    st["h"] = torch.empty(M, N, dtype=torch.bfloat16, device=device)
    st["g"] = torch.empty(M, N, dtype=torch.bfloat16, device=device)
    st["s"] = torch.empty(M, device=device)
    st["out"] = torch.empty(ITEMS, device=device)                    # the scores
    for name in ("h", "g", "s", "out", "table", "query"):
        st[f"{name}_cu"] = view(st[name])
    st["gelu"] = kernel(KERNEL_SRC, "rl_gelu")
    st["rowsumsq"] = kernel(KERNEL_SRC, "rl_rowsumsq")
    st["scores"] = kernel(KERNEL_SRC, "rl_scores_warp")
    return st


def step(state: dict):
    import torch

    torch.matmul(state["x"], state["w1"], out=state["h"])                           # 1. GEMM (cuBLAS)
    n8 = M * N // 8
    state["gelu"](((n8 + 255) // 256,), (256,), (state["h_cu"], state["g_cu"], np.int64(n8)))   # 2. elementwise
    state["rowsumsq"]((M,), (256,), (state["g_cu"], state["s_cu"], np.int32(N // 8)))          # 3. reduction
    state["scores"](((ITEMS * 32 + 255) // 256,), (256,),                                       # 4. GEMV, a warp per item
                    (state["table_cu"], state["query_cu"], state["out_cu"], np.int32(ITEMS), np.int32(DIM // 4)))
    return state["s"], state["out"]
