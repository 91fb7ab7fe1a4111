"""speed-of-light: the reference solution.

Same model, same weights, same requests, same outputs (up to bf16 rounding: one GEMM of 32768 rows adds
in another order than 1024 GEMMs of 32 rows). The N waiting requests are served as one batch: the
[N, 32, 8192] requests are viewed as [N*32, 8192] rows, the model runs once, and the result is viewed
back as [N, 32, 8192]. No Python loop, no copies.

What is left is two large bf16 GEMMs (32768 x 8192 x 2048 and 32768 x 2048 x 8192, 1.1 TFLOP each)
and one GELU. The doctor finds nothing to fix at the system level (`healthy`: the GPU is busy nearly all
the step), and the GEMMs run close to the bf16 matmul throughput `perflab bench` measured on the same
H100 (artifacts/ceilings.json). The rest of the step is the GELU, a memory-bound pass over a
32768 x 2048 tensor. A hand-written GEMM could at best close the small gap between the GEMMs' time and
their FLOPs at the measured ceiling: this is where to stop.
"""
from __future__ import annotations

from perflab.workloads import siblings

# The model, the weights and the requests: this puzzle's workload.py (the slow server), unchanged.
_w = siblings.load(__file__, "64-speed-of-light")
setup, forward = _w.setup, _w.forward   # setup(device, seed) -> state; forward(state, x [B, 8192]) -> [B, 8192]


def step(state: dict):
    import torch

    with torch.no_grad():
        n, rows, dim = state["requests"].shape
        y = forward(state, state["requests"].reshape(n * rows, dim))   # every waiting request in one batch
        return y.view(n, rows, dim)
