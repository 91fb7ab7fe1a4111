"""Tensor-core advice for what the GPU in the trace has (analysis.work.tensor_paths): TF32 and bf16 from compute
capability 8.0, fp16 alone on Volta and Turing (7.x), none before; general advice where the trace does not say."""
from __future__ import annotations

from perflab.analysis.work.tensor_paths import compute_capability, tensor_paths
from perflab.trace.model import Trace

GENERAL = ("Use tensor cores: torch.backends.cuda.matmul.allow_tf32 = True (or torch.set_float32_matmul_precision"
           "('high')), cudnn.allow_tf32, or run the model in bf16/fp16 (autocast).")
FP16_ONLY = ("Use the fp16 tensor cores: run the model under torch.autocast('cuda', dtype=torch.float16) (with "
             "torch.amp.GradScaler when training) or in .half(); this GPU (compute capability {cc}) has no TF32 or "
             "bf16 tensor cores, so allow_tf32 and bf16 do not help it.")


def tensor_core_fix(trace: Trace) -> str | None:
    """The fix sentence for fp32 matrix math on the SIMT path; None when the GPU has no tensor cores."""
    cc = compute_capability(trace)
    paths = tensor_paths(trace)
    if not paths:
        return None
    return GENERAL if "tf32" in paths else FP16_ONLY.format(cc=f"{cc[0]}.{cc[1]}" if cc else "?")
