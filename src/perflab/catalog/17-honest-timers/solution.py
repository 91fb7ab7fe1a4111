"""honest-timers: the reference solution.

Same queries, weights and centroids, same probabilities as workload.py (to TF32 rounding). The
author's perf_counter() figures blamed ``postprocess``: a host clock read without a synchronize
measures how long the host takes to *enqueue* a part, and the first call that waits for the GPU
(``.cpu()`` in postprocess) absorbs everything queued before it. CUDA events put the time where it
is spent: ``encode``, two fp32 GEMMs (4096 -> 8192 -> 4096) on the FP32 SIMT pipes (sgemm/ffma kernels, about
50 TFLOP/s on an H100).

The fix keeps fp32 tensors and runs the fp32 matmuls of ``encode`` and ``select`` on the tensor cores
as TF32 (10-bit mantissa inputs, fp32 accumulate): torch.set_float32_matmul_precision("high").
The precision is a process-wide setting; a service sets it once at start-up. Here it is set around
the matmuls and restored, so that the slow reference the checker runs in the same process stays
fp32 (the setting is read when a matmul is launched).
"""
from __future__ import annotations

import contextlib

from perflab.workloads import siblings

_w = siblings.load(__file__, "17-honest-timers")   # this puzzle's workload.py: what the fix keeps
SIZE, SMOKE_SIZE, PARTS, _build, postprocess = (_w.SIZE, _w.SMOKE_SIZE, _w.PARTS, _w._build,
                                                       _w.postprocess)


@contextlib.contextmanager
def tf32(on: bool = True):
    """fp32 matmuls on the tensor cores (TF32) inside the block; the previous setting after it."""
    import torch

    previous = torch.get_float32_matmul_precision()
    if on:
        torch.set_float32_matmul_precision("high")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)


def encode(state: dict) -> None:
    import torch.nn.functional as F

    with tf32(state["x"].is_cuda):
        state["h"] = F.gelu(state["x"] @ state["w1"]) @ state["w2"]


def select(state: dict) -> None:
    import torch

    with tf32(state["x"].is_cuda):
        scores = state["h"] @ state["centroids"].T
    state["probs"] = torch.softmax(scores, dim=-1)


setup = _w.setup   # the same inputs as workload.py


# step as in workload.py, written out here: it must call this file's encode and select.
def step(state: dict):
    import torch

    with torch.no_grad():
        encode(state)
        select(state)
        postprocess(state)
    return state["probs"]
