"""GPU work by kernel name and by kernel type."""
from __future__ import annotations

import re

import numpy as np

from perflab.analysis.idle.intervals import length
from perflab.analysis.idle.launches import assigned_step
from perflab.analysis.steps.links import gpu_rows
from perflab.analysis.steps.windows import Windows, per_windows
from perflab.trace.model import MEMCPY, MEMSET, Trace

TYPES = ("gemm", "conv", "attention", "elementwise", "reduction", "memcpy", "memset", "communication", "other")

# Order matters: the first matching pattern wins (attention kernels are often CUTLASS GEMMs inside).
_PATTERNS = (
    ("memcpy", re.compile(r"^(memcpy|dma)|^copy(host|device)to", re.I)),
    ("memset", re.compile(r"^memset|^fill(buffer|device)", re.I)),
    # NCCL/RCCL, MPI-style names, NVSHMEM, DeepEP and pplx expert dispatch/combine, the custom all-reduces of
    # vLLM/SGLang (cross_device_reduce), TensorRT-LLM/FlashInfer (one/two-shot, lamport), PyTorch symmetric
    # memory (multimem), Megatron/TE userbuffers, MSCCL++, AMD quick reduce, UCC
    ("communication", re.compile(
        r"nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|cross_device_reduce|nvshmem|"
        r"one_?shot_?all|two_?shot_?all|multimem|deep_?ep::|\bpplx::|a2a_?(dispatch|combine)|moe_?a2a|"
        r"lamport|userbuffers|mscclpp|quick_?reduce|\bucc_", re.I)),
    ("attention", re.compile(r"flash|fmha|attention|attn|sdpa|mha_|xformers|paged_att|_fwd_kernel_?split", re.I)),
    ("elementwise", re.compile(r"embedding|multi_tensor_apply|nchwtonhwc|nhwctonchw", re.I)),
    ("conv", re.compile(r"conv|implicit_?gemm|fprop|dgrad|wgrad|winograd|fft2d|cudnn::detail::|[sh]cudnn", re.I)),
    ("reduction", re.compile(r"cudnn::bn|batch_?norm|\bbn_|gammabeta", re.I)),
    ("gemm", re.compile(
        r"gemm|gemv|nvjet|xmma|cutlass|cublas|matmul|\bmm_|_mm\b|_mm_|triton_tem|cijk_|splitk|"
        r"[shi](16816|1688|884|8816)|wgmma|hmma|gmma|kernel2<", re.I)),
    ("reduction", re.compile(
        r"reduce|reduction|softmax|norm|argmax|argmin|topk|cumsum|scan|sort|radix|histogram|"
        r"triton_red|triton_per|welford|_sum|sum_|mean|logsumexp|max_pool|avg_pool|adaptive_\w*pool", re.I)),
    ("elementwise", re.compile(
        r"elementwise|vectorized|unrolled|pointwise|triton_poi|fill|copy|catarray|index|gather|scatter|"
        r"where|embedding|dropout|gelu|silu|relu|swish|tanh|sigmoid|activation|rotary|rope|cast|"
        r"distribution|philox|arange", re.I)),
)

# FP32 matrix math on the SIMT path: cuBLAS sgemm kernels, CUTLASS simt kernels, xmma ffma kernels.
_SIMT_GEMM = re.compile(r"sgemm|simt|ffma|f32f32_f32f32_f32|gemmsn_|scudnn", re.I)
_TENSOR_CORE = re.compile(r"tensorop|[shi](16816|1688|884|8816)|hmma|imma|gmma|wgmma|tf32|bf16|fp16|f16|"
                          r"e4m3|e5m2|nvjet|int8|i8", re.I)


def first_match(patterns, name: str, default: str = "other") -> str:
    """The label of the first (label, regex) pair whose regex occurs in name."""
    return next((label for label, pattern in patterns if pattern.search(name)), default)


def classify(name: str) -> str:
    return first_match(_PATTERNS, name)


def is_simt_gemm(name: str) -> bool:
    """A GEMM/conv kernel that runs FP32 math without tensor cores."""
    return classify(name) in ("gemm", "conv") and bool(_SIMT_GEMM.search(name)) and not _TENSOR_CORE.search(name)


def fp32_math_on_fma(name: str) -> bool:
    """An FP32 matrix op's kernel that does its math on the FMA pipes: a SIMT GEMM, or a matrix-vector kernel (cuBLAS
    gemv: tensor cores have no matrix-vector path). A batched product of the same operands would run there too unless
    TF32 is enabled, which the trace does not say."""
    return is_simt_gemm(name) or (classify(name) == "gemm" and "gemv" in name.lower() and not _TENSOR_CORE.search(name))


def type_table(trace: Trace) -> np.ndarray:
    """Kernel type index (into TYPES) per distinct name."""
    return trace.cached("kernel_type_table", lambda: np.array(
        [TYPES.index(classify(n)) for n in trace.names], dtype=np.int8))


def row_types(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Kernel type index per row; memcpy/memset rows by their kind whatever their name."""
    table = type_table(trace)
    types = table[trace.name[rows]] if rows.size else np.zeros(0, dtype=np.int8)
    types = np.where(trace.kind[rows] == MEMCPY, TYPES.index("memcpy"), types)
    return np.where(trace.kind[rows] == MEMSET, TYPES.index("memset"), types).astype(np.int8)


def window_gpu_rows(trace: Trace, windows: Windows) -> np.ndarray:
    """GPU work rows launched inside the windows (read-only: a dozen analyses share it)."""
    def compute(trace: Trace, windows: Windows) -> np.ndarray:
        rows = gpu_rows(trace)
        out = rows[assigned_step(trace, windows, rows) >= 0]
        out.flags.writeable = False
        return out
    return per_windows(trace, "window_gpu_rows", windows, compute)


def kernel_breakdown(trace: Trace, windows: Windows, top: int = 10) -> dict:
    rows = window_gpu_rows(trace, windows)
    total = float(trace.dur[rows].sum())
    types = row_types(trace, rows)
    by_type = {}
    for i, name in enumerate(TYPES):
        sel = rows[types == i]
        if sel.size:
            t = float(trace.dur[sel].sum())
            by_type[name] = {"total_us": t, "count": int(sel.size), "pct": 100.0 * t / total if total else 0.0,
                             "busy_us": length(trace.ts[sel], trace.end[sel])}
    names = trace.name[rows]
    sums = np.bincount(names, weights=trace.dur[rows], minlength=len(trace.names)) if rows.size else np.zeros(0)
    counts = np.bincount(names, minlength=len(trace.names)) if rows.size else np.zeros(0, dtype=np.int64)
    order = np.argsort(-sums, kind="stable")[:top] if sums.size else []
    by_name = [{"name": trace.names[i], "type": classify(trace.names[i]), "total_us": float(sums[i]),
                "count": int(counts[i]), "mean_us": float(sums[i] / counts[i]),
                "pct": 100.0 * float(sums[i]) / total if total else 0.0}
               for i in order if counts[i] > 0]
    return {"gpu_time_us": total, "by_type": by_type, "by_name": by_name}
