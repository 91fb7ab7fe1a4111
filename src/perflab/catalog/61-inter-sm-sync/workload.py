"""atomic-contention (inter-SM communication through global memory): the slow workload.

A deterministic global sum of squares of 16 M fp32 values (the squared norm behind a per-tensor scale),
reproducible bit for bit: blocks add their partial sums into the total strictly in chunk order. Each
block takes a chunk number from a global ticket, reduces its 4096 values in shared memory, then thread 0
waits for its turn (polling a global counter with atomicAdd(&turn, 0)), adds its partial to the running
total in global memory and passes the turn on. 4096 hand-offs between SMs through L2, one after the
other, while up to two thousand resident blocks hammer the one word that says whose turn it is.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state``, ``step(state) -> out`` ([1] fp32).
"""
from __future__ import annotations

import numpy as np

from perflab.workloads.cuda_kernels import kernel, view

N, CHUNK, THREADS = 16 << 20, 4096, 128

KERNEL_SRC = r"""
extern "C" __global__ void sumsq_in_order(const float4* __restrict__ x, float* __restrict__ out,
                                          unsigned int* __restrict__ tickets, int chunk4) {
  // tickets[0]: chunks handed out (in the order blocks start), tickets[1]: chunks added to *out so far
  __shared__ unsigned int chunk;
  __shared__ float warp_sums[32];
  if (threadIdx.x == 0) chunk = atomicAdd(&tickets[0], 1u);
  __syncthreads();
  const float4* p = x + (size_t)chunk * chunk4;
  float acc = 0.f;
  for (int i = threadIdx.x; i < chunk4; i += blockDim.x) {
    float4 v = p[i];
    acc += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
  }
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    float part = 0.f;
    for (int w = 0; w < (int)(blockDim.x >> 5); ++w) part += warp_sums[w];   // fixed order
    // TODO: every block waits here for the one before it: 4096 hand-offs through global memory, one
    // at a time, and the waiting blocks poll one word with atomics. Keep the result deterministic (a
    // fixed order of additions) without making blocks wait for each other: one write per block, then
    // one fixed-order sum of the partials (a second kernel, or the last block to finish).
    while (atomicAdd(&tickets[1], 0u) != chunk) { }      // wait until chunk - 1 has added its part
    __threadfence();
    float total = chunk == 0 ? 0.f : *(volatile float*)out;
    *(volatile float*)out = total + part;                  // the running total, in chunk order
    __threadfence();
    atomicAdd(&tickets[1], 1u);                            // pass the turn on
    if (chunk == gridDim.x - 1) { tickets[0] = 0u; tickets[1] = 0u; }   // ready for the next launch
  }
}
"""


def make_input(device: str, seed: int):
    import torch

    gen = torch.Generator(device=device).manual_seed(int(seed))  # drawn on the device: fast
    return torch.randn(N, generator=gen, device=device)


def reference(x):
    """What every variant must return, to fp32 rounding (float64 in torch)."""
    return (x.double() ** 2).sum().float().reshape(1)


def setup(device: str, seed: int) -> dict:
    import torch

    x = make_input(device, seed)
    out = torch.zeros(1, device=device)
    tickets = torch.zeros(2, dtype=torch.int32, device=device)
    return {"x": x, "out": out, "tickets": tickets, "x_cu": view(x), "out_cu": view(out),
            "tickets_cu": view(tickets), "kernel": kernel(KERNEL_SRC, "sumsq_in_order")}


def step(state: dict):
    state["kernel"]((N // CHUNK,), (THREADS,),
                    (state["x_cu"], state["out_cu"], state["tickets_cu"], np.int32(CHUNK // 4)))
    return state["out"]


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("x",)


def refill(state: dict, seed: int) -> None:
    """New values, drawn as setup draws them (the CuPy view shares the tensor's memory)."""
    from perflab.workloads import fresh

    fresh.redraw(state, make_input, seed, "x")
