"""tail-effect: the reference solution. A persistent grid: one block per SM (what the registers allow:
BLOCKS_PER_SM), each thread striding over all particles, so every SM gets 1/SMs of the work instead of
one chunk each plus one SM doing a second chunk alone. Each particle gets the same 128 steps in the same
order: the same results.

The slow version: see workload.py's docstring.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state``, ``step(state) -> out`` ([N] fp32 positions).
"""
from __future__ import annotations


import numpy as np

from perflab.workloads import siblings

_w = siblings.load(__file__, "58-tail-effect")   # this puzzle's workload.py: what the fix keeps
CHUNK, ADVANCE, sm_count, make_input, reference_state, with_kernel = (
    _w.CHUNK, _w.ADVANCE, _w.sm_count, _w.make_input, _w.reference_state, _w.with_kernel)

THREADS, ILP, GROUPS = 1024, 16, 16
BLOCKS_PER_SM = 1                       # 1024 threads x > 32 registers: one block per SM


KERNEL_SRC = ADVANCE + r"""
// Persistent: as many blocks as fit at once (one per SM), each thread strides over ALL particles, so the
// work is split evenly to within 16 particles per thread whatever the particle count.
extern "C" __global__ void __launch_bounds__(1024) integrate_particles(const float* __restrict__ x0,
    const float* __restrict__ v0, float* __restrict__ out, int chunk, int n) {
  const int stride = gridDim.x * blockDim.x;
  for (int first = blockIdx.x * blockDim.x + threadIdx.x; first < n; first += 16 * stride)
    advance16(x0, v0, out, first, stride, n);
}
"""


def setup(device: str, seed: int) -> dict:
    return with_kernel(device, seed, KERNEL_SRC)   # the workload's particles, this kernel


def step(state: dict):
    blocks = sm_count(state["out"].device) * BLOCKS_PER_SM   # a full wave, no tail
    state["kernel"]((blocks,), (THREADS,), (*state["args"], np.int32(CHUNK), np.int32(state["n"])))
    return state["out"]
