"""batch-size-knee: the reference solution.

Same model, same requests, same outputs (up to fp32 rounding: a batched GEMM adds in another order
than a GEMV). The N waiting requests are served in batches of BATCH=1024 instead of one by one.

Why 1024: the batch-size sweep (artifacts/sweep.json and sweep.png, recorded on the H100) shows
the time of one forward pass flat while the GPU waits on the host to launch kernels, then rising
once the GEMMs are big enough to keep the GPU busy. Throughput grows with the batch and levels
off; 1024 is the knee there, the smallest batch with at least 80 % of the best throughput. Past it
a larger batch mostly adds latency. At 1024 each forward keeps the GPU busy several times longer
than the host needs to launch it, so the GPU never waits for the host.
"""
from __future__ import annotations

from perflab.workloads import siblings

_w = siblings.load(__file__, "13-batch-size-knee")   # this puzzle's workload.py: what the fix keeps
SIZE, SMOKE_SIZE, _build, forward, make_batch = (_w.SIZE, _w.SMOKE_SIZE, _w._build, _w.forward,
                                                        _w.make_batch)


setup = _w.setup   # the same weights and requests as workload.py


BATCH = 1024
SMOKE_BATCH = 8


def step(state: dict):
    import torch

    batch = SMOKE_BATCH if state["size"] == SMOKE_SIZE else BATCH
    with torch.no_grad():
        outs = [forward(state, x) for x in state["requests"].split(batch)]   # BATCH requests at a time
        return torch.cat(outs)
