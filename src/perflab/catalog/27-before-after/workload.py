"""before-after: the slow workload, AFTER the change (recorded as artifacts/slow.trace.json.gz).

The same 24 projection layers as before.py, after a pull request with two edits:

1. the hand-written tanh-GELU (seven elementwise kernels per layer) became
   ``F.gelu(h, approximate="tanh")``: one fused kernel, the same formula;
2. "while we are at it", a guard against numerical blow-ups: after every layer the step checks
   that the activations are all finite and raises otherwise (``if not torch.isfinite(h).all()``).

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> tensor``
(the activations after the last layer, [tokens, hidden] in the model dtype).
"""
from __future__ import annotations

from perflab.workloads import siblings

_b = siblings.load(__file__, "27-before-after", "before.py")   # the workload before the change
SIZE, SMOKE_SIZE = _b.SIZE, _b.SMOKE_SIZE


def setup(device: str, seed: int) -> dict:
    return _b.build(device, seed)


def step(state: dict):
    import torch
    import torch.nn.functional as F

    x = state["x"]
    with torch.no_grad():
        for i, (w, b) in enumerate(zip(state["weights"], state["biases"])):
            x = F.gelu(F.linear(x, w, b), approximate="tanh")
            if not torch.isfinite(x).all():
                raise FloatingPointError(f"non-finite activations after layer {i}")
    return x


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("x",)
