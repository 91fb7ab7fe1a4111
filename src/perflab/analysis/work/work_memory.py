"""The bytes of ops that move data rather than compute it: elementwise, casts and copies, reductions,
softmax, normalizations, embeddings and gathers, pooling. FLOPs are counted at one per output element
(several for softmax and norms): beside the bytes they never decide these ops' speed of light."""
from __future__ import annotations

import math

from perflab.analysis.work.op_args import SCALAR_TYPE_BYTES, OpArgs
from perflab.analysis.work.work_formulas import Work, _broadcast, _itemsize

ELEMENTWISE = frozenset((
    "add", "sub", "mul", "div", "rsub", "neg", "abs", "exp", "exp2", "expm1", "log", "log2", "log1p", "sqrt",
    "rsqrt", "pow", "reciprocal", "sin", "cos", "tanh", "sigmoid", "relu", "relu6", "gelu", "silu", "mish",
    "hardswish", "hardsigmoid", "leaky_relu", "elu", "softplus", "threshold", "clamp", "clamp_min", "clamp_max",
    "clip", "where", "masked_fill", "addcmul", "addcdiv", "lerp", "maximum", "minimum", "fmod", "remainder",
    "floor", "ceil", "round", "trunc", "sign", "erf", "erfc", "eq", "ne", "lt", "le", "gt", "ge", "logical_and",
    "logical_or", "logical_not", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "isnan", "isinf",
    "isfinite", "nan_to_num", "square", "true_divide", "floor_divide", "native_dropout", "dropout", "tril", "triu",
    "hardtanh", "glu", "copysign", "__rshift__", "__lshift__", "__and__", "__or__", "__xor__", "atan2", "heaviside", "logit", "xlogy", "polar", "angle", "conj_physical",
))
# How many tensor inputs an op reads; tensors beyond them are `out=` results (written, not read).
_ARITY = {**{op: 1 for op in ("neg", "abs", "exp", "exp2", "expm1", "log", "log2", "log1p", "sqrt", "rsqrt",
                              "reciprocal", "sin", "cos", "tanh", "sigmoid", "relu", "relu6", "gelu", "silu", "mish",
                              "hardswish", "hardsigmoid", "leaky_relu", "elu", "softplus", "floor", "ceil", "round",
                              "trunc", "sign", "erf", "erfc", "logical_not", "bitwise_not", "isnan", "isinf",
                              "isfinite", "nan_to_num", "square", "hardtanh", "logit", "tril", "triu")},
          **{op: 2 for op in ("add", "sub", "mul", "div", "rsub", "pow", "maximum", "minimum", "fmod", "remainder",
                              "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "bitwise_and",
                              "bitwise_or", "bitwise_xor", "true_divide", "floor_divide", "masked_fill", "copysign",
                              "atan2", "xlogy", "__rshift__", "__lshift__", "__and__", "__or__", "__xor__")},
          **{op: 3 for op in ("where", "addcmul", "addcdiv", "lerp", "clamp")}}
_BOOL_OUT = frozenset(("eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_not", "isnan",
                       "isinf", "isfinite"))
CASTS = frozenset(("_to_copy", "to", "type_as", "_autocast_to_reduced_precision", "_autocast_to_full_precision"))
COPIES = frozenset(("copy_", "clone", "contiguous", "cat", "_cat", "stack", "fill_", "zero_", "zeros_like",
                    "ones_like", "full_like", "index_copy_", "_copy_from", "_copy_from_and_resize", "repeat",
                    "constant_pad_nd", "pad", "flip", "roll", "expand_copy", "narrow_copy", "slice_scatter",
                    "select_scatter", "masked_scatter", "repeat_interleave", "tile", "linspace", "arange",
                    "normal_", "uniform_", "random_", "bernoulli_", "exponential_", "randn", "rand", "randint"))
REDUCTIONS = frozenset(("sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "prod", "norm",
                        "linalg_vector_norm", "var", "std", "var_mean", "std_mean", "all", "any", "logsumexp",
                        "cumsum", "cumprod", "topk", "sort", "argsort", "nonzero", "unique", "_unique2", "count_nonzero",
                        "bincount", "histc", "aminmax", "nansum", "median", "mode", "kthvalue"))
SOFTMAX = frozenset(("softmax", "_softmax", "log_softmax", "_log_softmax", "_safe_softmax", "_masked_softmax"))
NORMS = frozenset(("native_layer_norm", "layer_norm", "rms_norm", "_fused_rms_norm", "native_group_norm",
                   "group_norm", "native_batch_norm", "batch_norm", "_batch_norm_impl_index", "cudnn_batch_norm",
                   "miopen_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
                   "instance_norm", "_batch_norm_with_update", "_batch_norm_no_update", "fused_add_rms_norm"))
GATHERS = frozenset(("embedding", "index_select", "gather", "take", "embedding_bag", "_embedding_bag",
                     "_embedding_bag_forward_only",
                     "index", "index_put_", "index_put", "scatter", "scatter_", "scatter_add", "scatter_add_",
                     "index_add_", "index_add", "scatter_reduce", "_index_put_impl_", "masked_select"))
POOLING = frozenset(("max_pool2d_with_indices", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d",
                     "_adaptive_avg_pool2d", "max_pool1d", "avg_pool1d", "max_pool3d_with_indices", "avg_pool3d",
                     "adaptive_max_pool2d", "_adaptive_avg_pool3d", "upsample_nearest2d", "upsample_bilinear2d",
                     "_upsample_nearest_exact2d", "grid_sampler_2d", "pixel_shuffle"))


def elementwise(op: str, a: OpArgs) -> Work | None:
    ts = [t for t in a.tensors() if t is not None]
    if not ts:
        return None
    base = op.rstrip("_")
    inplace = op.endswith("_")
    outs = ts[_ARITY[base]:] if base in _ARITY else []
    ts = ts[:_ARITY[base]] if base in _ARITY else ts
    if outs:  # op(..., out=t): the result goes into t
        written = sum(t.nbytes for t in outs)
        return Work("elementwise", float(outs[0].numel), sum(t.nbytes for t in ts) + written, out_bytes=written)
    out_numel = math.prod(_broadcast(ts))
    out_size = 1 if base in _BOOL_OUT else _itemsize(ts)
    if base in ("native_dropout", "dropout"):
        out_numel, out_size = ts[0].numel, (ts[0].itemsize or 1) + 1   # the output and its mask
    written = ts[0].nbytes if inplace else out_numel * out_size
    distinct = {(t.sizes, t.dtype): t.nbytes for t in ts}
    return Work("elementwise", float(out_numel), sum(t.nbytes for t in ts) + written, out_bytes=written,
                aliased_bytes=sum(distinct.values()) + written if len(distinct) < len(ts) else None)


def cast(op: str, a: OpArgs) -> Work | None:
    """copy_(dst, src) reads src and writes dst (a cast when their dtypes differ); _to_copy(src, dtype=...)."""
    if op == "copy_":
        dst, src = a.tensor(0), a.tensor(1)
        if dst is None or src is None:
            return None
        family = "cast" if dst.dtype != src.dtype and dst.dtype and src.dtype else "copy"
        work = Work(family, 0.0, src.nbytes + dst.nbytes, out_bytes=dst.nbytes)
        work.weight = src if family == "cast" else None
        return work
    src = a.tensor(0)
    if src is None:
        return None
    out_size = 1.0
    code = a.scalar(1)
    if op == "_to_copy" and code and code.isdigit():
        out_size = SCALAR_TYPE_BYTES.get(int(code), 1)
    elif op == "type_as" and a.tensor(1) is not None:
        out_size = a.tensor(1).itemsize or 1
    work = Work("cast", 0.0, src.nbytes + src.numel * out_size, out_bytes=src.numel * out_size)
    work.weight = src
    return work


def copy(op: str, a: OpArgs) -> Work | None:
    ts = [t for t in a.tensors() if t is not None]
    if op in ("fill_", "zero_", "zeros_like", "ones_like", "full_like", "linspace", "arange", "normal_", "uniform_",
              "random_", "bernoulli_", "exponential_"):   # written, nothing read
        return Work("copy", 0.0, ts[0].nbytes) if ts else None
    if not ts:
        return None
    if op in ("cat", "_cat", "stack"):
        known = [t.itemsize for t in ts if t.itemsize]
        size = known[0] if known else 1
        n = sum(t.numel for t in ts)
        return Work("copy", 0.0, 2.0 * n * size, out_bytes=n * size)
    src = ts[0]
    return Work("copy", 0.0, 2.0 * src.nbytes, out_bytes=src.nbytes)


def reduction(op: str, a: OpArgs) -> Work | None:
    x = a.tensor(0)
    if x is None:
        return None
    out = x.nbytes if op in ("cumsum", "cumprod", "sort", "argsort") else 0.0
    return Work("reduction", float(x.numel), x.nbytes + out)


def softmax(op: str, a: OpArgs) -> Work | None:
    x = a.tensor(0)
    if x is None:
        return None
    extra = a.tensor(1).nbytes if op == "_masked_softmax" and a.tensor(1) is not None else 0.0
    return Work("softmax", 5.0 * x.numel, 2.0 * x.nbytes + extra, out_bytes=x.nbytes)


def norm(op: str, a: OpArgs) -> Work | None:
    x = a.tensor(0)
    if x is None:
        return None
    params = sum(t.nbytes for t in a.tensors()[1:] if t is not None and t.numel < x.numel)
    extra = x.nbytes if op == "fused_add_rms_norm" else 0.0   # the residual, read and written back
    return Work("norm", 8.0 * x.numel, 2.0 * x.nbytes + params + 2 * extra, out_bytes=x.nbytes + extra)


def gather(op: str, a: OpArgs) -> Work | None:
    ts = a.tensors()
    if op in ("embedding", "index_select", "_embedding_bag", "embedding_bag", "_embedding_bag_forward_only"):
        table = a.tensor(0)
        idx = a.tensor(1) if op != "index_select" else a.tensor(2)
        if table is None or idx is None or len(table.sizes) < 1:
            return None
        row = math.prod(table.sizes[1:]) * (table.itemsize or 1)
        rows = idx.numel
        writes = 0.0 if "bag" in op else rows * row      # a bag reduces its rows: its output is not counted
        return Work("embedding", 0.0, rows * row + writes + idx.nbytes)
    if op in ("gather", "take"):
        x, idx = a.tensor(0), a.tensor(2) if op == "gather" else a.tensor(1)
        if x is None or idx is None:
            return None
        return Work("embedding", 0.0, 2.0 * idx.numel * (x.itemsize or 1) + idx.nbytes)
    if not ts:
        return None
    # index / index_put / scatter: what is surely moved is the indices and the values written
    idx_bytes = sum(t.nbytes for t in ts[1:] if t is not None)
    return Work("embedding", 0.0, idx_bytes, notes=["indexed access: only the indices and values are counted"])


def pooling(op: str, a: OpArgs) -> Work | None:
    x = a.tensor(0)
    if x is None:
        return None
    return Work("pooling", float(x.numel), x.nbytes, notes=["output bytes not counted (sizes not recorded)"])


def backward(op: str, a: OpArgs) -> Work | None:
    """A training op's backward (not a matmul or conv): each input read once and one input-sized result
    written; a lower bound for the elementwise, norm and pooling backwards of a training step."""
    ts = [t for t in a.tensors() if t is not None and t.numel > 0]
    if not ts:
        return None
    biggest = max(ts, key=lambda t: t.nbytes)
    return Work("backward", float(biggest.numel), sum(t.nbytes for t in ts) + biggest.nbytes)


def memory_op(op: str, a: OpArgs) -> Work | None:
    """The work of a data-moving op, or None when `op` is not one the model knows."""
    for names, formula in _BY_FAMILY:
        if op in names:
            return formula(op, a)
    if op.rstrip("_") in ELEMENTWISE:
        return elementwise(op, a)
    if op.endswith("_backward") or op.endswith("_backward_data") or "_backward_" in op:
        return backward(op, a)
    return None


_BY_FAMILY = ((CASTS | {"copy_"}, cast), (COPIES, copy), (SOFTMAX, softmax), (NORMS, norm), (GATHERS, gather),
              (REDUCTIONS, reduction), (POOLING, pooling))
