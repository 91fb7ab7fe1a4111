"""fp8-weight-only: your fix goes here (perflab start copies this file to perflab-work/fp8-weight-only/fix.py).

The model: one decode step of a Llama-3.2-3B-shaped model (batch 1, bf16 activations) whose linear
weights are stored in float8_e4m3fn with a bf16 scale per output row. Storing fp8 halves the weight
bytes; decode is memory-bound, so it should be faster than bf16. It is several times slower. The decode
step is already replayed as one CUDA graph (as torch.compile's "reduce-overhead" does): no launch
overhead, the time is the GPU's.

`Fp8WeightOnlyLinear.forward` below is the slow path. Keep the weights in fp8 (weight_fp8, scale) and
the same maths (y = x @ (fp8_to_bf16(w) * scale).T, rounded like that), but do not materialize the
bf16 weight: read the fp8 weight and its scale inside the matmul kernel (a Triton GEMV for M = 1),
so each weight byte is read once. Stretch: faster than the same model in bf16.

Check with: perflab check fp8-weight-only
"""
from __future__ import annotations

import os

POSITION = 32


def config(device: str) -> dict:
    from perflab.workloads import llama

    if str(device).startswith("cpu") or os.environ.get("PERFLAB_SMOKE", "0") != "0":
        return dict(llama.SMOKE)
    return dict(llama.LLAMA_3_2_3B)


def make_linear(linear):
    import torch.nn.functional as F
    from torch import nn

    from perflab.workloads.fp8 import quantize_rows

    class Fp8WeightOnlyLinear(nn.Module):
        def __init__(self, lin):
            super().__init__()
            q, s = quantize_rows(lin.weight)           # fp8 [N, K], bf16 scale [N, 1]
            self.register_buffer("weight_fp8", q)
            self.register_buffer("scale", s)

        def forward(self, x):
            # TODO: this widens the whole weight to bf16 in memory (2 kernels) before every matmul.
            w = self.weight_fp8.to(x.dtype) * self.scale
            return F.linear(x, w)

    return Fp8WeightOnlyLinear(linear)


def setup(device: str, seed: int) -> dict:
    import torch

    from perflab.workloads import llama

    cfg = config(device)
    model = llama.build(cfg, device, seed)
    llama.swap_linears(model, make_linear)
    if str(device).startswith("cuda"):
        torch.cuda.empty_cache()
    gen = torch.Generator().manual_seed(int(seed) + 1)
    tokens = torch.randint(0, cfg["vocab"], (1, 1), generator=gen).to(device)
    state = {"model": model, "tokens": tokens, "pos": POSITION, "graph": None}
    if str(device).startswith("cuda"):
        state["graph"], state["out"] = llama.capture_decode(model, tokens, POSITION)
    return state


def step(state: dict):
    import torch

    if state["graph"] is not None:
        state["graph"].replay()
        return state["out"]
    with torch.no_grad():
        return state["model"](state["tokens"], state["pos"])
