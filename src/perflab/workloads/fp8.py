"""fp8 weight-only linears without torchao: weights stored float8_e4m3fn with one bf16 scale per output
row. `Fp8DequantLinear` is the slow path torchao's Float8WeightOnlyConfig takes in eager mode: each call
widens the whole weight to bf16 (a conversion kernel), scales it (a multiply kernel), then runs a bf16
GEMM; the fp8 bytes saved in storage are spent several times over in traffic.
torch is imported lazily.
"""
from __future__ import annotations

from typing import Any

FP8_MAX = 448.0  # largest finite float8_e4m3fn


def quantize_rows(weight: Any) -> tuple[Any, Any]:
    """bf16 weight [N, K] -> (float8_e4m3fn [N, K], bf16 scale [N, 1]) with per-row absmax scaling."""
    import torch

    w = weight.detach().float()
    scale = (w.abs().amax(dim=1, keepdim=True) / FP8_MAX).clamp(min=1e-12)
    q = (w / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, scale.to(torch.bfloat16)


def make_dequant_linear(linear: Any) -> Any:
    """An nn.Module replacing `linear`: fp8 weight + scale, dequantize-then-matmul on every call."""
    import torch.nn.functional as F
    from torch import nn

    class Fp8DequantLinear(nn.Module):
        def __init__(self, lin):
            super().__init__()
            q, s = quantize_rows(lin.weight)
            self.register_buffer("weight_fp8", q)
            self.register_buffer("scale", s)
            self.in_features, self.out_features = lin.in_features, lin.out_features

        def forward(self, x):
            w = self.weight_fp8.to(x.dtype) * self.scale   # two kernels, a full-size bf16 weight in memory
            return F.linear(x, w)

    return Fp8DequantLinear(linear)
