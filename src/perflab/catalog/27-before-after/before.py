"""before-after: the workload BEFORE the change (recorded as artifacts/before.trace.json.gz).

A stack of 24 projection layers (hidden 2,048, bf16) applied to 4,096 tokens, each followed by the
tanh approximation of GELU written out op by op, the way the paper states it:
0.5 * h * (1 + tanh(sqrt(2/pi) * (h + 0.044715 * h^3))). Every op is its own kernel that reads and
writes the whole activation.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> tensor``
(the activations after the last layer, [tokens, hidden] in the model dtype).
"""
from __future__ import annotations

import math

from perflab.workloads import sizes

SIZE = {"tokens": 4096, "hidden": 2048, "layers": 24}
SMOKE_SIZE = {"tokens": 16, "hidden": 32, "layers": 3}
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def build(device: str, seed: int) -> dict:
    import torch

    size = sizes.pick(device, SIZE, SMOKE_SIZE)
    dtype = torch.bfloat16 if str(device).startswith("cuda") else torch.float32
    gen = torch.Generator().manual_seed(int(seed))
    d = size["hidden"]
    weights = [(torch.randn(d, d, generator=gen) * d ** -0.5).to(device=device, dtype=dtype)
               for _ in range(size["layers"])]
    biases = [(torch.randn(d, generator=gen) * 0.1).to(device=device, dtype=dtype) for _ in range(size["layers"])]
    x = torch.randn(size["tokens"], d, generator=gen).to(device=device, dtype=dtype)
    return {"size": size, "weights": weights, "biases": biases, "x": x, "device": str(device)}


def gelu_tanh(h):
    import torch

    inner = (h + 0.044715 * h * h * h) * SQRT_2_OVER_PI
    return 0.5 * h * (1.0 + torch.tanh(inner))


def setup(device: str, seed: int) -> dict:
    return build(device, seed)


def step(state: dict):
    import torch
    import torch.nn.functional as F

    x = state["x"]
    with torch.no_grad():
        for w, b in zip(state["weights"], state["biases"]):
            x = gelu_tanh(F.linear(x, w, b))
    return x
