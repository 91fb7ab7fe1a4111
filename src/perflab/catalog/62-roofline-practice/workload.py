"""roofline practice: the slow workload (four kernels; one of them far below its roof).

One step of a toy retrieval model, four kernels:
  1. a GEMM: h = x @ w1, bf16 [4096, 1024] x [1024, 4096] (torch.matmul: cuBLAS on the tensor cores)
  2. an elementwise: g = gelu(h) (sigmoid approximation), bf16 in and out       (rl_gelu)
  3. a reduction: s[i] = sum_j g[i, j]^2, one fp32 per row                    (rl_rowsumsq)
  4. a GEMV: scores = E @ q, a query against 256 K items of dim 512, fp32     (rl_scores)
The GEMV gives each thread one item: thread i walks row i of E (item-major, as nn.Embedding stores it)
while its 31 neighbours walk 31 other rows, 2 KB apart: every load instruction of a warp touches 32
different sectors.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state``, ``step(state) -> (s, scores)`` (fp32).
"""
from __future__ import annotations

import numpy as np

from perflab.workloads.cuda_kernels import kernel, view

M, K, N = 4096, 1024, 4096           # the GEMM and the [M, N] activations
ITEMS, DIM = 256 * 1024, 512         # the embedding table E [ITEMS, DIM] fp32 (512 MB)

# The elementwise and the reduction (near their roofs; the fix keeps them) and the GEMV (far below its roof).
NEAR_ROOF_SRC = r"""
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
"""

KERNEL_SRC = NEAR_ROOF_SRC + r"""
extern "C" __global__ void rl_scores(const float* __restrict__ E, const float* __restrict__ q,
                                     float* __restrict__ out, int items, int dim) {
  int item = blockIdx.x * blockDim.x + threadIdx.x;                 // one thread per item
  if (item >= items) return;
  const float* row = E + (size_t)item * dim;                         // lanes: 32 rows, 2 KB apart
  float acc = 0.f;
  for (int k = 0; k < dim; ++k) acc = fmaf(row[k], q[k], acc);
  out[item] = acc;
}
"""


def make_inputs(device: str, seed: int) -> dict:
    import torch

    gen = torch.Generator(device=device).manual_seed(int(seed))  # drawn on the device: fast
    x = (torch.randn(M, K, generator=gen, device=device) * 0.5).to(torch.bfloat16)
    w1 = (torch.randn(K, N, generator=gen, device=device) / K ** 0.5).to(torch.bfloat16)
    table = torch.rand(ITEMS, DIM, generator=gen, device=device) - 0.5
    query = torch.rand(DIM, generator=gen, device=device) - 0.5
    return {"x": x, "w1": w1, "table": table, "query": query}


def reference_state(state: dict):
    """What every variant must return, in torch (the GPU tests compare against it)."""
    import torch

    h = torch.matmul(state["x"], state["w1"])
    hf = h.float()
    g = (hf * torch.sigmoid(1.702 * hf)).to(torch.bfloat16)
    return ((g.float() ** 2).sum(dim=1), state["table"] @ state["query"])


def setup(device: str, seed: int) -> dict:
    return build(device, seed, KERNEL_SRC, "rl_scores")


def build(device: str, seed: int, source: str, gemv: str) -> dict:
    """Inputs, buffers (with their CuPy views) and the kernels of `source`, its GEMV named `gemv`."""
    import torch

    st = make_inputs(device, seed)
    st["h"] = torch.empty(M, N, dtype=torch.bfloat16, device=device)
    st["g"] = torch.empty(M, N, dtype=torch.bfloat16, device=device)
    st["s"] = torch.empty(M, device=device)
    st["out"] = torch.empty(ITEMS, device=device)                    # the scores
    for name in ("h", "g", "s", "out", "table", "query"):
        st[f"{name}_cu"] = view(st[name])
    st["gelu"] = kernel(source, "rl_gelu")
    st["rowsumsq"] = kernel(source, "rl_rowsumsq")
    st["scores"] = kernel(source, gemv)
    return st


def near_roof(state: dict) -> None:
    """Kernels 1-3: the GEMM, the elementwise and the reduction."""
    import torch

    torch.matmul(state["x"], state["w1"], out=state["h"])                           # 1. GEMM (cuBLAS)
    n8 = M * N // 8
    state["gelu"](((n8 + 255) // 256,), (256,), (state["h_cu"], state["g_cu"], np.int64(n8)))   # 2. elementwise
    state["rowsumsq"]((M,), (256,), (state["g_cu"], state["s_cu"], np.int32(N // 8)))          # 3. reduction


def step(state: dict):
    near_roof(state)
    state["scores"](((ITEMS + 255) // 256,), (256,),                                            # 4. GEMV
                    (state["table_cu"], state["query_cu"], state["out_cu"], np.int32(ITEMS), np.int32(DIM)))
    return state["s"], state["out"]


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("x", "query")  # w1 and the item table are weights


def refill(state: dict, seed: int) -> None:
    """New activations and query, drawn as setup draws them."""
    import torch

    new = make_inputs(str(state["x"].device), seed)
    with torch.no_grad():
        state["x"].copy_(new["x"])
        state["query"].copy_(new["query"])
