"""before-after: the reference solution.

Keeps the improvement (the fused ``F.gelu(..., approximate="tanh")``) and the guard, without the
regression: the finiteness check no longer asks the host. ``torch._assert_async`` raises from the
device when its argument is false, so the layers are launched back to back and the GPU never waits
for the CPU to read a flag; a blow-up still fails the step (as a device-side assertion, reported at
the next synchronization). One check of the output per step instead of one per layer: a non-finite
value in any layer propagates to the output (NaN stays NaN; inf turns into NaN in the next
matmul's inf - inf or inf * 0), so the per-layer checks catch nothing the last one misses.
"""
from __future__ import annotations

from perflab.workloads import siblings

_w = siblings.load(__file__, "27-before-after")   # this puzzle's workload.py: what the fix keeps
SIZE, SMOKE_SIZE = _w.SIZE, _w.SMOKE_SIZE


def setup(device: str, seed: int) -> dict:
    return _w.setup(device, seed)


# step as in workload.py but for its finite check, written out here so that the one change reads in place.
def step(state: dict):
    import torch
    import torch.nn.functional as F

    x = state["x"]
    with torch.no_grad():
        for w, b in zip(state["weights"], state["biases"]):
            x = F.gelu(F.linear(x, w, b), approximate="tanh")
        # a NaN or inf in any layer reaches the output (inf * 0, inf - inf, gelu(-inf) are NaN):
        # one check of the output, raised from the device, without a host round-trip
        torch._assert_async(torch.isfinite(x).all(), "non-finite activations")
    return x
