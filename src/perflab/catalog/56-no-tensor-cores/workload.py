"""no-tensor-cores: the slow workload.

C = A @ B for 4096 x 4096 fp32 matrices with a hand-written CUDA GEMM: a decent SIMT kernel (128x128
block tile, 8x8 outputs per thread, float4 shared-memory loads), the kind that was state of the art
before tensor cores. Every multiply-add is an FFMA on the FP32 pipe; the H100's tensor cores, with
an order of magnitude more throughput, sit idle.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state``, ``step(state) -> out`` ([4096, 4096] fp32).
"""
from __future__ import annotations

import numpy as np

from perflab.workloads.cuda_kernels import kernel, view

M = N = K = 4096

KERNEL_SRC = r"""
extern "C" __global__ void __launch_bounds__(256) sgemm_simt_128x128(int M, int N, int K, const float* __restrict__ A,
                                                                     const float* __restrict__ B, float* __restrict__ C) {
  __shared__ __align__(16) float As[8][128];  // A tile, transposed: As[k][m]
  __shared__ __align__(16) float Bs[8][128];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int bm = blockIdx.y * 128, bn = blockIdx.x * 128;
  const int a_row = tid / 2, a_col = (tid % 2) * 4, b_row = tid / 32, b_col = (tid % 32) * 4;
  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;
  for (int k0 = 0; k0 < K; k0 += 8) {
    float4 a = *reinterpret_cast<const float4*>(&A[(size_t)(bm + a_row) * K + k0 + a_col]);
    As[a_col + 0][a_row] = a.x; As[a_col + 1][a_row] = a.y; As[a_col + 2][a_row] = a.z; As[a_col + 3][a_row] = a.w;
    *reinterpret_cast<float4*>(&Bs[b_row][b_col]) = *reinterpret_cast<const float4*>(&B[(size_t)(k0 + b_row) * N + bn + b_col]);
    __syncthreads();
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      float ra[8], rb[8];
      *reinterpret_cast<float4*>(&ra[0]) = *reinterpret_cast<const float4*>(&As[k][ty * 4]);
      *reinterpret_cast<float4*>(&ra[4]) = *reinterpret_cast<const float4*>(&As[k][64 + ty * 4]);
      *reinterpret_cast<float4*>(&rb[0]) = *reinterpret_cast<const float4*>(&Bs[k][tx * 4]);
      *reinterpret_cast<float4*>(&rb[4]) = *reinterpret_cast<const float4*>(&Bs[k][64 + tx * 4]);
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(ra[i], rb[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int m = bm + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int nn = bn + (j < 4 ? tx * 4 + j : 64 + tx * 4 + j - 4);
      C[(size_t)m * N + nn] = acc[i][j];
    }
  }
}
"""


def make_inputs(device: str, seed: int):
    import torch

    gen = torch.Generator(device=device).manual_seed(int(seed))  # drawn on the device: fast
    a = torch.rand(M, K, generator=gen, device=device) - 0.5
    b = torch.rand(K, N, generator=gen, device=device) - 0.5
    return a, b


def reference_state(state: dict):
    import torch

    return torch.matmul(state["a"].double(), state["b"].double()).float()


def setup(device: str, seed: int) -> dict:
    import torch

    a, b = make_inputs(device, seed)
    out = torch.empty(M, N, device=device)
    return {"a": a, "b": b, "out": out, "a_cu": view(a), "b_cu": view(b), "out_cu": view(out),
            "kernel": kernel(KERNEL_SRC, "sgemm_simt_128x128")}


def step(state: dict):
    # TODO: this GEMM runs on the FP32 pipe. Which unit of the H100 is built for matrix products?
    state["kernel"]((N // 128, M // 128), (256,), (np.int32(M), np.int32(N), np.int32(K), state["a_cu"], state["b_cu"],
                                                   state["out_cu"]))
    return state["out"]


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("a",)  # b: the weight operand, which a fix may re-layout once


def refill(state: dict, seed: int) -> None:
    """A new activation operand, drawn as setup draws it."""
    state["a"].copy_(make_inputs(str(state["a"].device), seed)[0])
