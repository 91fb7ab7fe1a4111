"""energy-precision: the reference solution.

Same requests, same weights, the same block in bf16: the weights are converted to bf16 once, in
setup(); each batch converts its inputs, runs both GEMMs bf16 x bf16 on the tensor cores (cuBLAS
accumulates in fp32) and returns the result as fp32. The fp32 version ran on the FP32 SIMT pipes at
about 50 TFLOP/s; bf16 on the tensor cores is an order of magnitude faster. The GPU draws more power
while it does so, but for so much less time that the joules per inference fall by about as much as
the time: energy = power x time, and the idle-ish floor of an H100's power is paid per second.

The result matches fp32 to bf16 accuracy (relative error of a few 1e-3, checked at 5e-2).
"""
from __future__ import annotations

from perflab.workloads import siblings

_w = siblings.load(__file__, "30-energy-precision")   # this puzzle's workload.py: what the fix keeps
SIZE, SMOKE_SIZE, _build, mlp = _w.SIZE, _w.SMOKE_SIZE, _w._build, _w.mlp


def setup(device: str, seed: int) -> dict:
    import torch

    state = _build(device, seed)
    state["w1_bf16"] = state["w1"].to(torch.bfloat16)                 # once, not per batch
    state["w2_bf16"] = state["w2"].to(torch.bfloat16)
    return state


def step(state: dict):
    import torch

    with torch.no_grad():
        return mlp(state["x"].to(torch.bfloat16), state["w1_bf16"], state["w2_bf16"]).float()
