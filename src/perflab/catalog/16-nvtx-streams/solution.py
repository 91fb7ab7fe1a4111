"""nvtx-streams: the reference solution.

Same frames, same weights, the same logits as workload.py (to rounding). The stage that dominates
the GPU is ``preprocess``, although its range is short on the host: it only *enqueues* six
memory-bound passes over 100 M pixels (uint8 -> fp32, * 1/255, - 0.5, * 2, -> bf16, the patch copy),
about 4 GB of HBM traffic a step. ``postprocess`` looks slow on the host only because its ``.cpu()``
waits there for everything queued before it.

The fix makes preprocess one pass: a small Triton kernel (perflab.workloads.patch_prep_kernel) reads
each uint8 pixel once, scales it the same way in registers and writes it, as bf16, straight into its
place in the patch matrix: 3 bytes of traffic per pixel instead of about 39. (torch.compile of the
preprocess function generates the same kind of fused kernel; folding the affine normalization into
the patch-embedding weights, W' = W * 2/255 and bias = -colsum(W), removes it altogether.) The
stages and their annotations stay as they were. On the CPU it runs the plain chain.
"""
from __future__ import annotations

from perflab.workloads import siblings

_w = siblings.load(__file__, "16-nvtx-streams")   # this puzzle's workload.py: what the fix keeps
SIZE, SMOKE_SIZE, _build, patchify, model, postprocess = (
    _w.SIZE, _w.SMOKE_SIZE, _w._build, _w.patchify, _w.model, _w.postprocess)


def preprocess(state: dict):
    import torch

    if state["images"].is_cuda:                                     # one fused pass on the GPU
        from perflab.workloads.patch_prep_kernel import patch_prep

        return patch_prep(state["images"], state["size"]["patch"])
    x = state["images"].float()
    x = x / 255.0
    x = x - 0.5
    x = x / 0.5
    return patchify(x.to(torch.bfloat16), state["size"]["patch"])


setup = _w.setup   # the same frames and model as workload.py


# step as in workload.py, written out here: it must call this file's preprocess.
def step(state: dict):
    import torch
    from torch.profiler import record_function

    with torch.no_grad():
        with record_function("preprocess"):
            patches = preprocess(state)
        with record_function("model"):
            logits = model(state, patches)
        with record_function("postprocess"):
            state["labels_out"] = postprocess(state, logits)
    return logits
