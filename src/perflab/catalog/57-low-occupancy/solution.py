"""low-occupancy: the reference solution. Only the shared buffer changes: 64 floats, one per thread, instead
of 12288. The 48 KB buffer allowed 4 blocks (8 warps) per SM, 12.5 % of the warp slots, far too few
16-byte loads in flight to cover DRAM latency; with 256 bytes the SM holds 32 blocks (64 warps, its
maximum). Same code, same reduction order, same results.

The slow version: see workload.py's docstring.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state``, ``step(state) -> out`` ([ROWS] fp32).
"""
from __future__ import annotations

from perflab.workloads import siblings

_w = siblings.load(__file__, "57-low-occupancy")   # this puzzle's workload.py: what the fix keeps
KERNEL_BODY, make_input, reference, with_kernel = _w.KERNEL_BODY, _w.make_input, _w.reference, _w.with_kernel

KERNEL_SRC = r"""
extern "C" __global__ void row_sum_squares(const float4* __restrict__ x, float* __restrict__ out, int cols4) {
  __shared__ float stage[64];      // one entry per thread (THREADS = 64): 256 bytes, not 48 KB
""" + KERNEL_BODY


def setup(device: str, seed: int) -> dict:
    return with_kernel(device, seed, KERNEL_SRC, "row_sum_squares")   # the workload's input and output, this kernel


step = _w.step   # the same launch as workload.py: only the kernel changed
