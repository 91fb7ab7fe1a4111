"""atomic-contention (inter-SM communication through global memory): the reference solution.

Still deterministic, with no block waiting for another. Block b reduces chunk b in shared memory and
writes its partial to partials[b] (one write per block), makes it visible (__threadfence) and counts
itself done with one atomicAdd. The block that finds it was the last one (the classic "threadfence
reduction") sums the 4096 partials in a fixed order (a strided loop, then a fixed shuffle and shared-memory
tree) and resets the counter. One atomic per block instead of thousands of polls, and no hand-offs: the
kernel reads its 64 MB at DRAM speed. The order of additions differs from the chained version's (a tree
instead of a running sum), so the last bits may differ; it is the same on every run.
"""
from __future__ import annotations

import numpy as np

from perflab.workloads.cuda_kernels import kernel, view

N, CHUNK, THREADS = 16 << 20, 4096, 128

KERNEL_SRC = r"""
__device__ float block_sum(float acc, float* warp_sums) {      // fixed order: deterministic
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = acc;
  __syncthreads();
  float total = 0.f;
  if (threadIdx.x == 0)
    for (int w = 0; w < (int)(blockDim.x >> 5); ++w) total += warp_sums[w];
  return total;                                                 // valid in thread 0
}

extern "C" __global__ void sumsq_partials_last_block(const float4* __restrict__ x, float* __restrict__ out,
                                                     float* __restrict__ partials, unsigned int* __restrict__ done,
                                                     int chunk4) {
  __shared__ float warp_sums[32];
  __shared__ bool last;
  const float4* p = x + (size_t)blockIdx.x * chunk4;
  float acc = 0.f;
  for (int i = threadIdx.x; i < chunk4; i += blockDim.x) {
    float4 v = p[i];
    acc += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
  }
  float part = block_sum(acc, warp_sums);
  if (threadIdx.x == 0) {
    partials[blockIdx.x] = part;                                // one write per block
    __threadfence();                                            // visible before we count ourselves done
    last = atomicAdd(done, 1u) == gridDim.x - 1;                // one atomic per block, nobody waits
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  acc = 0.f;                                                    // the last block: all partials, fixed order
  for (int i = threadIdx.x; i < (int)gridDim.x; i += blockDim.x) acc += ((volatile float*)partials)[i];
  __syncthreads();                                              // warp_sums is reused
  float total = block_sum(acc, warp_sums);
  if (threadIdx.x == 0) { *out = total; *done = 0u; }
}
"""


def setup(device: str, seed: int) -> dict:
    import torch

    gen = torch.Generator(device=device).manual_seed(int(seed))  # drawn on the device: fast
    x = torch.randn(N, generator=gen, device=device)
    out = torch.zeros(1, device=device)
    partials = torch.zeros(N // CHUNK, device=device)
    done = torch.zeros(1, dtype=torch.int32, device=device)
    return {"x": x, "out": out, "partials": partials, "done": done, "x_cu": view(x), "out_cu": view(out),
            "partials_cu": view(partials), "done_cu": view(done),
            "kernel": kernel(KERNEL_SRC, "sumsq_partials_last_block")}


def step(state: dict):
    state["kernel"]((N // CHUNK,), (THREADS,),
                    (state["x_cu"], state["out_cu"], state["partials_cu"], state["done_cu"], np.int32(CHUNK // 4)))
    return state["out"]
