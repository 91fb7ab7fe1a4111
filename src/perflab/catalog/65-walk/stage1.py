"""walk: stage 1, after the system-level fix (the launches).

The epilogue runs over the whole [4096, 4096] tensor at once: ~10 kernels per step instead of ~10 per
block of 16 rows, and the GPU no longer waits for Python to launch them. Walked again, the top of the report
is a kernel: the fp32 matmul runs on the FP32 SIMT path (FFMA), far below the tensor cores' roof.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state``, ``step(state) -> y`` ([4096, 4096] fp32).
"""
from __future__ import annotations

from perflab.workloads import siblings

_w = siblings.load(__file__, "65-walk")
setup = _w.setup


def step(state: dict):
    return _w.epilogue(_w.project(state), state["bias"], state["gamma"], state["residual"])
