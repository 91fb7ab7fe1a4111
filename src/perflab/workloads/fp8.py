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


# ---- the configs table (artifacts/configs.json, scripts/record.py fp8-configs) -----------------------------

CONFIG_LABELS = {
    "bf16": "bf16 (none)",
    "torchao-float8wo": "torchao Float8WeightOnlyConfig",
    "torchao-float8dq": "torchao Float8DynamicActivationFloat8WeightConfig",
    "perflab-dequant": "perflab dequantize-then-matmul (slow)",
    "perflab-fused": "perflab fused Triton GEMV (solution)",
}


def configs_table(doc: dict) -> str:
    """The README's markdown table, every cell a figure of configs.json's model_rows (none typed)."""
    head = ("| config | tok/s (generate, eager) | decode tok/s (graph) | decode tok/s (eager) | weight GB/s (graph) "
            "| weights MB | peak allocated MB (eager / graph) | peak reserved MB (eager / graph) |")
    lines = [head, "|" + "---|" * 8]
    for r in doc["model_rows"]:
        if "error" in r:
            lines.append(f"| {CONFIG_LABELS.get(r['config'], r['config'])} | error: {r['error'][:60]} |" + " |" * 6)
            continue
        lines.append(
            f"| {CONFIG_LABELS.get(r['config'], r['config'])} | {r['eager_generate_tok_s']:.1f} "
            f"| {r['graph_decode_tok_s']:.1f} | {r['eager_decode_tok_s']:.1f} | {r['graph_weight_gbps']:.0f} "
            f"| {r['weights_mb']:.0f} | {r['eager_peak_allocated_mb']:.0f} / {r['graph_peak_allocated_mb']:.0f} "
            f"| {r['eager_peak_reserved_mb']:.0f} / {r['graph_peak_reserved_mb']:.0f} |")
    return "\n".join(lines)


def symptom_figures(doc: dict) -> dict:
    """The figures the README's symptom statement quotes, formatted as it quotes them: Float8WeightOnlyConfig
    against bf16 in the same graphed decode (speed) and at the inference peaks (memory)."""
    rows = {r["config"]: r for r in doc["model_rows"]}
    b, w = rows["bf16"], rows["torchao-float8wo"]
    return {
        "graph_slowdown": f"{b['graph_decode_tok_s'] / w['graph_decode_tok_s']:.1f}x",
        "bf16_graph_tok_s": f"{b['graph_decode_tok_s']:.1f}",
        "wo_graph_tok_s": f"{w['graph_decode_tok_s']:.1f}",
        "wo_weights_gb": f"{w['weights_mb'] / 1024:.2f} GiB",
        "bf16_weights_gb": f"{b['weights_mb'] / 1024:.2f} GiB",
        "wo_graph_reserved_gb": f"{w['graph_peak_reserved_mb'] / 1024:.1f} GiB",
        "bf16_graph_reserved_gb": f"{b['graph_peak_reserved_mb'] / 1024:.1f} GiB",
        "wo_eager_allocated_gb": f"{w['eager_peak_allocated_mb'] / 1024:.2f} GiB",
        "bf16_eager_allocated_gb": f"{b['eager_peak_allocated_mb'] / 1024:.2f} GiB",
        "wo_temporaries_gb": f"{(w['eager_peak_allocated_mb'] - w['weights_mb']) / 1024:.2f} GiB",
        "wo_load_leftover_gb": f"{(w['reserved_before_mb'] - w['weights_mb']) / 1024:.2f} GiB",
        "eager_ratio": f"{b['eager_decode_tok_s'] / w['eager_decode_tok_s']:.2f}",
        "fused_over_bf16": f"{rows['perflab-fused']['graph_decode_tok_s'] / b['graph_decode_tok_s']:.2f}x",
        "dq_graph_tok_s": f"{rows['torchao-float8dq']['graph_decode_tok_s']:.1f}",
    }
