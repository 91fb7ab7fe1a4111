"""walk: stage 2, after the first kernel-level fix (the tensor cores).

The matmul runs as TF32 on the tensor cores (`torch.set_float32_matmul_precision("high")` around it: fp32
tensors, 10-bit mantissa products, fp32 accumulation); ~8x less time. Walked again, the top is the next
kernel-level problem: the epilogue's chain of elementwise kernels, each reading and writing a full
64 MiB tensor through HBM, now takes more of the step than the matmul.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state``, ``step(state) -> y`` ([4096, 4096] fp32).
"""
from __future__ import annotations

from perflab.workloads import siblings

_w = siblings.load(__file__, "65-walk")
setup = _w.setup


def step(state: dict):
    return _w.epilogue(_w.project(state, "high"), state["bias"], state["gamma"], state["residual"])
