"""warp-divergence: the slow workload.

A per-channel activation mix: channel c of the interleaved [N/8, 8] tensor goes through one of 8
different iterated functions (think of 8 heads with different nonlinearities). One thread per
element, so lane l of a warp handles channel l % 8: every warp contains all 8 channels and executes
all 8 loops one after another, each with only 4 of its 32 lanes active.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state``, ``step(state) -> out`` ([N] fp32).
"""
from __future__ import annotations

import numpy as np

from perflab.workloads.cuda_kernels import kernel_state

N, ITERS, THREADS = 1 << 21, 256, 256

# the 8 channel functions (shared by every variant: only the thread -> element mapping may change)
CHANNEL_FUNCTIONS = r"""
__device__ __forceinline__ float channel_fn(int ch, float x, int iters) {
  switch (ch) {
    case 0: for (int k = 0; k < iters; ++k) x = __sinf(x) * 1.0001f + 0.1f; break;
    case 1: for (int k = 0; k < iters; ++k) x = __cosf(x) * 0.9999f - 0.1f; break;
    case 2: for (int k = 0; k < iters; ++k) x = sqrtf(fabsf(x) + 1.f) - 0.5f; break;
    case 3: for (int k = 0; k < iters; ++k) x = __expf(-fabsf(x)) + 0.25f; break;
    case 4: for (int k = 0; k < iters; ++k) x = __logf(fabsf(x) + 2.f) * 0.5f; break;
    case 5: for (int k = 0; k < iters; ++k) x = rsqrtf(fabsf(x) + 1.f) + 0.125f; break;
    case 6: for (int k = 0; k < iters; ++k) x = fmaf(x, x, -0.25f) * 0.5f; break;
    default: for (int k = 0; k < iters; ++k) x = __fdividef(1.f, fabsf(x) + 1.5f); break;
  }
  return x;
}
"""

KERNEL_SRC = CHANNEL_FUNCTIONS + r"""
extern "C" __global__ void channel_mix(const float* __restrict__ in, float* __restrict__ out, int n, int iters) {
  // TODO: a warp's 32 lanes cover all 8 channels. Map threads to elements so a warp runs one channel.
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = channel_fn(i & 7, in[i], iters);
}
"""


def make_input(device: str, seed: int):
    import torch

    gen = torch.Generator(device=device).manual_seed(int(seed))  # drawn on the device: fast
    return (torch.rand(N, generator=gen, device=device) - 0.5)


def setup(device: str, seed: int) -> dict:
    return with_kernel(device, seed, KERNEL_SRC, "channel_mix")


def with_kernel(device: str, seed: int, source: str, name: str) -> dict:
    """The input, the output and the kernel `name` compiled from `source`."""
    import torch

    x = make_input(device, seed)
    return kernel_state(x, torch.empty_like(x), source, name)


def step(state: dict):
    state["kernel"](((N + THREADS - 1) // THREADS,), (THREADS,),
                    (state["x_cu"], state["out_cu"], np.int32(N), np.int32(ITERS)))
    return state["out"]


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("x",)


def refill(state: dict, seed: int) -> None:
    """New values, drawn as setup draws them (the CuPy view shares the tensor's memory)."""
    from perflab.workloads import fresh

    fresh.redraw(state, make_input, seed, "x")
