"""warp-divergence: the reference solution. Same functions, another thread -> element mapping:
in a block of 256 threads (8 warps) covering 256 consecutive elements, warp w takes the 32 elements
of channel w (lane l -> element 8*l + w). Every warp now takes one branch with all 32 lanes active.
A warp's loads become strided by 8 floats, but the block reads the same 1 KB as before (L1 hits)
and the kernel is compute-bound: the price is nothing next to 8x fewer issued instructions.

The slow version: see workload.py's docstring.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state``, ``step(state) -> out`` ([N] fp32).
"""
from __future__ import annotations

from perflab.workloads import siblings

_w = siblings.load(__file__, "53-warp-divergence")   # this puzzle's workload.py: what the fix keeps
CHANNEL_FUNCTIONS, make_input, with_kernel = _w.CHANNEL_FUNCTIONS, _w.make_input, _w.with_kernel

KERNEL_SRC = CHANNEL_FUNCTIONS + r"""
extern "C" __global__ void channel_mix_sorted(const float* __restrict__ in, float* __restrict__ out, int n,
                                              int iters) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;      // blockDim.x == 256: 8 warps
  int i = blockIdx.x * blockDim.x + lane * 8 + warp;               // channel i % 8 == warp: uniform
  if (i >= n) return;
  out[i] = channel_fn(i & 7, in[i], iters);
}
"""


def setup(device: str, seed: int) -> dict:
    return with_kernel(device, seed, KERNEL_SRC, "channel_mix_sorted")   # the workload's input and output, this kernel


step = _w.step   # the same launch as workload.py: only the kernel changed
