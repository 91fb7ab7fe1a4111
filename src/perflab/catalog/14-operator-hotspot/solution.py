"""operator-hotspot: the reference solution.

Same input, same blocks, same head weights as workload.py. The head no longer runs in fp32: its
weights are converted to bf16 once, in setup(), and the head GEMM runs bf16 x bf16 on the tensor
cores (cuBLAS accumulates in fp32 either way); only the result is converted to fp32. The fp32 head
GEMM ran on the FP32 SIMT pipes (sgemm/ffma kernels) at a fraction of the tensor-core rate: one
operator, a seventh of the FLOPs, most of the time.

(TF32 is the other fix: torch.backends.cuda.matmul.allow_tf32 = True keeps fp32 inputs and runs
the GEMM on tensor cores with a 10-bit mantissa. Here the activations are bf16 already, so bf16
loses nothing the head's input did not already lose.)
"""
from __future__ import annotations

import math
import os

SIZE = {"rows": 4096, "dim": 4096, "layers": 6, "classes": 8192}
SMOKE_SIZE = {"rows": 16, "dim": 32, "layers": 2, "classes": 48}


def _size(device: str) -> dict:
    if str(device).startswith("cpu") or os.environ.get("PERFLAB_SMOKE", "0") != "0":
        return dict(SMOKE_SIZE)
    return dict(SIZE)


def _build(device: str, seed: int) -> dict:
    """Input, bf16 block weights and the fp32 head, drawn on the device from ``seed``."""
    import torch

    size = _size(device)
    gen = torch.Generator(device=device).manual_seed(int(seed))
    n, d, c = size["rows"], size["dim"], size["classes"]

    def randn(*shape, std=1.0):
        return torch.randn(*shape, generator=gen, device=device) * std

    return {"size": size, "device": str(device), "x": randn(n, d).to(torch.bfloat16),
            "blocks": [randn(d, d, std=1.5 / math.sqrt(d)).to(torch.bfloat16) for _ in range(size["layers"])],
            "head": randn(d, c, std=1.0 / math.sqrt(d))}            # fp32, as loaded


def body(x, blocks):
    """The bf16 blocks: x = gelu(x @ W_i)."""
    import torch.nn.functional as F

    for w in blocks:
        x = F.gelu(x @ w)
    return x


def setup(device: str, seed: int) -> dict:
    import torch

    state = _build(device, seed)
    state["head_bf16"] = state["head"].to(torch.bfloat16)           # once, not per step
    return state


def step(state: dict):
    import torch

    with torch.no_grad():
        x = body(state["x"], state["blocks"])
        return (x @ state["head_bf16"]).float()                    # tensor cores, fp32 result
