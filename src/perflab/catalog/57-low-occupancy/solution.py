"""low-occupancy: the reference solution. Only the shared buffer changes: 64 floats, one per thread, instead
of 12288. The 48 KB buffer allowed 4 blocks (8 warps) per SM, 12.5 % of the warp slots, far too few
16-byte loads in flight to cover DRAM latency; with 256 bytes the SM holds 32 blocks (64 warps, its
maximum). Same code, same reduction order, same results.

The slow version:

Row statistics for RMSNorm: out[r] = sum of x[r, :]**2 over 16384 rows of 4096 fp32 values (256 MB), one
block of 64 threads per row. Each thread streams its share of the row in 16-byte loads, one load in flight
at a time, and the block reduces the 64 partial sums in shared memory. The kernel was cut down from a tiled
version that staged 48 KB of the row per block in shared memory; the staging is gone, the buffer is not:
__shared__ float stage[12288] is still declared, and only its first 64 entries are used.

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
