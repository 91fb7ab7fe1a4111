"""tail-effect: the slow workload.

A damped-oscillator particle update: each particle (x, v) takes 128 explicit steps
(v += dt * (-k x - c v), x += dt v), a pure FP32 FMA workload. The particles come in chunks of 262144;
one block of 1024 threads integrates one chunk, each thread 16 particles at a time (16 independent chains
keep the FMA pipes busy). Those 16 (x, v) pairs take over 32 registers per thread, so one block fills an
SM's register file: one block per SM. This run has one chunk more than the GPU has SMs (the chunk count is
taken from the device, so the effect shows on any GPU): a full wave of blocks, then one block alone.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state``, ``step(state) -> out`` ([N] fp32 positions).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from perflab.workloads.cuda_kernels import kernel, view

THREADS, ILP, GROUPS = 1024, 16, 16
CHUNK = THREADS * ILP * GROUPS          # particles per chunk: 262144

ADVANCE = r"""
#define STEPS 128
// 16 particles first, first + stride, ..., first + 15 * stride (those below n), 128 steps each.
__device__ __forceinline__ void advance16(const float* __restrict__ x0, const float* __restrict__ v0,
                                          float* __restrict__ out, int first, int stride, int n) {
  float x[16], v[16];
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    int i = first + j * stride;
    x[j] = i < n ? x0[i] : 0.f;
    v[j] = i < n ? v0[i] : 0.f;
  }
#pragma unroll 1
  for (int s = 0; s < STEPS; ++s) {
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      v[j] = fmaf(-0.01f, x[j], fmaf(-0.001f, v[j], v[j]));   // dt = 0.01, k = 1, c = 0.1
      x[j] = fmaf(0.01f, v[j], x[j]);
    }
  }
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    int i = first + j * stride;
    if (i < n) out[i] = x[j];
  }
}
"""

KERNEL_SRC = ADVANCE + r"""
// One block per chunk: the grid is the number of chunks.
// TODO: how many waves of blocks is that on this GPU, and how full is the last one? (ncu: Launch Statistics,
// launch__waves_per_multiprocessor; Occupancy) Keep the kernel name integrate_particles.
extern "C" __global__ void __launch_bounds__(1024) integrate_particles(const float* __restrict__ x0,
    const float* __restrict__ v0, float* __restrict__ out, int chunk, int n) {
  const int base = blockIdx.x * chunk;
  for (int g = 0; g < chunk; g += 16 * blockDim.x)
    advance16(x0, v0, out, base + g + threadIdx.x, blockDim.x, n);
}
"""


@lru_cache(maxsize=8)
def sm_count(device) -> int:
    """The device's SM count (read from the device, never typed)."""
    import torch

    return torch.cuda.get_device_properties(device).multi_processor_count


def make_input(device: str, seed: int, n: int):
    import torch

    gen = torch.Generator(device=device).manual_seed(int(seed))  # drawn on the device: fast
    x0 = torch.rand(n, generator=gen, device=device) * 2 - 1
    v0 = torch.rand(n, generator=gen, device=device) * 2 - 1
    return x0, v0


def reference_state(state: dict):
    """What the kernel computes, in float64 (tests/gpu)."""
    x, v = state["x0"].double(), state["v0"].double()
    for _ in range(128):
        v = v - 0.001 * v - 0.01 * x
        x = x + 0.01 * v
    return x


def setup(device: str, seed: int) -> dict:
    return with_kernel(device, seed, KERNEL_SRC)


def with_kernel(device: str, seed: int, source: str) -> dict:
    """The particles (one chunk more than SMs), the output and integrate_particles compiled from `source`."""
    import torch

    chunks = sm_count(device) + 1       # one chunk more than SMs
    n = chunks * CHUNK
    x0, v0 = make_input(device, seed, n)
    out = torch.empty_like(x0)
    return {"x0": x0, "v0": v0, "out": out, "n": n, "chunks": chunks, "args": (view(x0), view(v0), view(out)),
            "kernel": kernel(source, "integrate_particles")}


def step(state: dict):
    state["kernel"]((state["chunks"],), (THREADS,), (*state["args"], np.int32(CHUNK), np.int32(state["n"])))
    return state["out"]


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("x0", "v0")


def refill(state: dict, seed: int) -> None:
    """New positions and velocities, drawn as setup draws them."""
    from perflab.workloads import fresh

    fresh.redraw(state, lambda device, s: make_input(device, s, state["n"]), seed, "x0", "v0")
