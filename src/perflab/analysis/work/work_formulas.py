"""The work one op must do, from its recorded arguments: FLOPs (2 per multiply-add) and the fewest bytes it
must move through device memory (each input read once, each output written once).

Both are lower bounds wherever an argument is missing (a dtype not recorded counts 1 byte per element, a
reduction's output 0 bytes, a causal flag not recorded counts as causal): a kernel may take longer than
its work says, never less, at the roof. `work_of` returns None for an op the model does not know; the
caller counts those as unmodelled.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from perflab.analysis.work.op_args import SCALAR_TYPE_BYTES, OpArgs, Tensor, precision

FAMILIES = ("matmul", "attention", "conv", "elementwise", "cast", "copy", "reduction", "softmax", "norm",
            "embedding", "pooling", "backward")


@dataclass
class Work:
    family: str
    flops: float
    bytes: float
    path: str = "memory"                 # the compute path: bf16, fp16, fp8, int8, tf32, fp32, fp64; or memory
    notes: list[str] = field(default_factory=list)
    weight: Tensor | None = None         # a matmul's weight operand, a cast's source (for dequant-overhead)
    out_bytes: float = 0.0               # of `bytes`, what the op writes (0 where the model does not split them)
    aliased_bytes: float | None = None   # `bytes` if its equal operands were one tensor (x * x reads x once)


def _broadcast(tensors: list[Tensor]) -> tuple[int, ...]:
    """The broadcast shape of the operands; the largest operand's shape when they do not broadcast (an op
    whose operands are not elementwise-aligned, e.g. a fused activation reading 2d and writing d)."""
    dims = max((len(t.sizes) for t in tensors), default=0)
    out = [1] * dims
    for t in tensors:
        for i, s in enumerate(t.sizes[::-1]):
            j = dims - 1 - i
            if out[j] == 1:
                out[j] = s
            elif s not in (1, out[j]):
                return max(tensors, key=lambda x: x.numel).sizes
    return tuple(out)


def _itemsize(tensors: list[Tensor]) -> float:
    """The result's element size: the widest dtype among the largest operands (a 0-dim tensor, such as a
    Python float wrapped as a double, does not promote a tensor's dtype)."""
    most = max((t.numel for t in tensors), default=0)
    sizes = [t.itemsize for t in tensors if t.itemsize and t.numel == most]
    return max(sizes) if sizes else 1


# ---- matrix multiplies -------------------------------------------------------------------------------

def _mm(m: int, k: int, n: int, batch: int, a: Tensor, b: Tensor, extra: float, out_itemsize: float,
        kernel: str) -> Work:
    from perflab.analysis.work.kernels import fp32_math_on_fma

    # weight-only quantization (one operand narrow): the math runs at the other operand's precision
    path = precision(b.dtype if a.narrow and not b.narrow else a.dtype)
    if path == "fp32" and kernel and not fp32_math_on_fma(kernel):
        path = "tf32"
    out = batch * m * n * out_itemsize
    weight = b if b.narrow or not a.narrow else a
    return Work("matmul", 2.0 * batch * m * n * k, a.nbytes + b.nbytes + extra + out, path, weight=weight, out_bytes=out)


def matmul(op: str, a: OpArgs, kernel: str) -> Work | None:
    first = 1 if op in ("addmm", "baddbmm", "addbmm", "_addmm_activation") else 0
    x, w = a.tensor(first), a.tensor(first + 1)
    if x is None or w is None or not x.sizes or not w.sizes:
        return None
    bias = a.tensor(0) if first else None
    extra = sum(t.nbytes for t in a.tensors() if t not in (x, w) and t is not None) if op.startswith("_scaled") else 0.0
    extra += bias.nbytes if bias is not None else 0.0
    out_size = x.itemsize or 1
    if op in ("_scaled_mm", "_scaled_grouped_mm"):
        code = a.scalar(6 if op == "_scaled_mm" else 7)
        out_size = SCALAR_TYPE_BYTES.get(int(code), 1) if code and code.isdigit() else 1
    if op in ("mm", "addmm", "_addmm_activation", "_scaled_mm", "_int_mm") and len(x.sizes) == len(w.sizes) == 2:
        (m, k), (k2, n) = x.sizes, w.sizes
        return _mm(m, k, n, 1, x, w, extra, out_size, kernel) if k == k2 else None
    if op in ("bmm", "baddbmm", "addbmm") and len(x.sizes) == len(w.sizes) == 3 and x.sizes[2] == w.sizes[1]:
        return _mm(x.sizes[1], x.sizes[2], w.sizes[2], x.sizes[0], x, w, extra, out_size, kernel)
    if op in ("linear", "_weight_int8pack_mm", "_weight_int4pack_mm", "_weight_int4pack_mm_for_cpu") and len(w.sizes) == 2:
        k = x.sizes[-1]
        n = w.sizes[0]
        if op == "_weight_int4pack_mm":     # (x, packed w, group size, scales and zeros): N from the scales
            sz = a.tensor(3)
            n = sz.sizes[1] if sz is not None and len(sz.sizes) >= 2 else n
        elif w.sizes[1] != k:
            return None
        if op == "linear" and a.tensor(2) is not None:
            extra += a.tensor(2).nbytes
        if op == "_weight_int8pack_mm" and a.tensor(2) is not None:
            extra += a.tensor(2).nbytes
        return _mm(math.prod(x.sizes[:-1]), k, n, 1, x, w, extra, out_size, kernel)
    if op == "matmul" and len(x.sizes) >= 2 and len(w.sizes) >= 2 and x.sizes[-1] == w.sizes[-2]:
        batch = math.prod(_broadcast([Tensor(x.sizes[:-2], ""), Tensor(w.sizes[:-2], "")]))
        return _mm(x.sizes[-2], x.sizes[-1], w.sizes[-1], batch, x, w, extra, out_size, kernel)
    return None


# ---- attention ------------------------------------------------------------------------------------------
# (layout of q/k/v: "bshd" or "bhsd", position of the causal flag in the op's schema)
_ATTENTION = {
    "_flash_attention_forward": ("bshd", 8), "_efficient_attention_forward": ("bshd", None),
    "_scaled_dot_product_flash_attention": ("bhsd", 4), "_scaled_dot_product_efficient_attention": ("bhsd", 6),
    "_scaled_dot_product_cudnn_attention": ("bhsd", 6), "_cudnn_attention_forward": ("bhsd", 10),
    "scaled_dot_product_attention": ("bhsd", 5), "_scaled_dot_product_fused_attention_overrideable": ("bhsd", 6),
    "_scaled_dot_product_flash_attention_for_cpu": ("bhsd", 4),
}


def attention(op: str, a: OpArgs) -> Work | None:
    layout, causal_at = _ATTENTION[op]
    q, k, v = a.tensor(0), a.tensor(1), a.tensor(2)
    if q is None or k is None or v is None or len(q.sizes) != 4 or len(k.sizes) != 4:
        return None
    seq_k = k.sizes[1] if layout == "bshd" else k.sizes[2]
    causal = a.flag(causal_at) if causal_at is not None else None
    if op == "_efficient_attention_forward":
        mask = a.scalar(9)
        causal = None if mask is None else mask != "0"
    notes = []
    factor = 1.0
    if causal is None:
        factor, notes = 0.5, ["causal flag not recorded: counted as causal (half the work), a lower bound"]
    elif causal:
        factor = 0.5
    flops = 4.0 * q.numel * seq_k * factor                # QK^T and PV, 2 FLOPs per multiply-add each
    bytes_ = q.nbytes * 2 + k.nbytes + v.nbytes           # read q, k, v; write o (q's size)
    return Work("attention", flops, bytes_, precision(q.dtype), notes)


# ---- convolutions ---------------------------------------------------------------------------------------
# position of (stride, padding, dilation, groups) in each schema; None: not in the schema
_CONV = {
    "convolution": (3, 4, 5, 8), "_convolution": (3, 4, 5, 8), "conv2d": (3, 4, 5, 6), "conv1d": (3, 4, 5, 6),
    "conv3d": (3, 4, 5, 6), "cudnn_convolution": (3, 2, 4, 5), "cudnn_convolution_relu": (3, 4, 5, 6),
    "cudnn_convolution_add_relu": (5, 6, 7, 8), "miopen_convolution": (4, 3, 5, 6),
    "miopen_depthwise_convolution": (4, 3, 5, 6), "_conv_depthwise2d": (4, 5, 6, None),
    "mkldnn_convolution": (4, 3, 5, 6), "_nnpack_spatial_convolution": (4, 3, None, None),
}


def conv(op: str, a: OpArgs, kernel: str) -> Work | None:
    from perflab.analysis.work.kernels import fp32_math_on_fma

    x, w = a.tensor(0), a.tensor(1)
    if x is None or w is None or len(x.sizes) < 3 or len(x.sizes) != len(w.sizes):
        return None
    if op in ("convolution", "_convolution") and a.flag(6):
        return None  # transposed: not modelled
    spatial = len(x.sizes) - 2
    s_at, p_at, d_at, g_at = _CONV[op]
    k = w.sizes[2:]

    def per_dim(at, default):
        vals = a.ints(at) if at is not None else None
        if vals is None:
            return None
        return vals * spatial if len(vals) == 1 else vals if len(vals) == spatial else None

    stride, pad, dil = per_dim(s_at, 1), per_dim(p_at, 0), per_dim(d_at, 1)
    groups = (a.ints(g_at) or (1,))[0] if g_at is not None else 1
    notes = []
    if stride is None or pad is None:
        notes.append("stride/padding not recorded: assumed stride 1 and 'same' padding")
        stride = stride or (1,) * spatial
        pad = pad or tuple((kk - 1) // 2 for kk in k)
    dil = dil or (1,) * spatial
    out_sp = [(x.sizes[2 + i] + 2 * pad[i] - dil[i] * (k[i] - 1) - 1) // stride[i] + 1 for i in range(spatial)]
    if any(o <= 0 for o in out_sp) or groups <= 0:
        return None
    n, cout = x.sizes[0], w.sizes[0]
    out_numel = n * cout * math.prod(out_sp)
    flops = 2.0 * out_numel * w.sizes[1] * math.prod(k)   # w.sizes[1] = Cin / groups
    bias = a.tensor(2) if op not in ("cudnn_convolution",) else None
    bytes_ = x.nbytes + w.nbytes + (bias.nbytes if bias is not None else 0) + out_numel * (x.itemsize or 1)
    path = precision(x.dtype)
    if path == "fp32" and kernel and not fp32_math_on_fma(kernel):
        path = "tf32"
    return Work("conv", flops, bytes_, path, notes)


def conv_backward(op: str, a: OpArgs, kernel: str) -> Work | None:
    """convolution_backward(grad_out, input, weight, ...): grad_out has the output's sizes, so no stride is needed.
    Each of grad input and grad weight is one forward's FLOPs."""
    if op == "convolution_backward":
        g, x, w = a.tensor(0), a.tensor(1), a.tensor(2)
        mask = a.scalar(10)
        parts = 2 if mask is None else max(1, sum(1 for t in mask.strip("[]").split(",")[:2] if "True" in t))
    elif op == "cudnn_convolution_backward_input":
        g, w, x = a.tensor(1), a.tensor(2), None
        parts = 1
    elif op == "cudnn_convolution_backward_weight":
        g, x, w = a.tensor(1), a.tensor(2), None
        parts = 1
    else:  # cudnn_convolution_backward(input, grad_out, weight, ...)
        x, g, w = a.tensor(0), a.tensor(1), a.tensor(2)
        parts = 2
    if g is None or (w is None and x is None) or len(g.sizes) < 3:
        return None
    cin_k = math.prod(w.sizes[1:]) if w is not None else None
    if cin_k is None:
        return None  # backward_weight alone: the kernel size is not recorded
    flops = 2.0 * g.numel * cin_k * parts
    bytes_ = sum(t.nbytes for t in (g, x, w) if t is not None)
    path = precision(g.dtype)
    if path == "fp32" and kernel and not re.search(r"sgemm|simt|ffma|scudnn|implicit_convolve", kernel, re.I):
        path = "tf32"
    return Work("conv", flops, bytes_, path)


def mm_family(op: str) -> bool:
    return op in ("mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "linear", "_scaled_mm", "_int_mm",
                  "_addmm_activation", "_weight_int8pack_mm", "_weight_int4pack_mm", "_scaled_grouped_mm")


def is_attention(op: str) -> bool:
    return op in _ATTENTION


def is_conv(op: str) -> bool:
    return op in _CONV


def is_conv_backward(op: str) -> bool:
    return op in ("convolution_backward", "cudnn_convolution_backward", "cudnn_convolution_backward_input",
                  "cudnn_convolution_backward_weight")
