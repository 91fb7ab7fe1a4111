"""Matrix-multiply work in a trace: FLOPs from the recorded shapes, GPU time from the kernels.

torch.profiler(record_shapes=True) writes every op's "Input Dims"; the reader keeps them for the matmul
ops. A GEMM kernel launched inside the analysis windows is tied to the op
that launched it by External id, and the op's shapes give its FLOPs (2 per multiply-add). FLOPs count once
per op and the op's time is the time of every kernel it launched (a split-K GEMM adds a reduction kernel).
GEMM kernels whose op or shapes are unknown (replayed from a CUDA graph, shapes not recorded) are counted
apart, with no FLOPs. Pure: a function of the trace and the windows.
"""
from __future__ import annotations

import json
import math
from collections import Counter

import numpy as np

from perflab.analysis.work.kernel_patterns import _op_of_kernel
from perflab.analysis.work.kernels import TYPES, row_types, window_gpu_rows
from perflab.analysis.steps.windows import Windows, per_windows
from perflab.trace.model import KERNEL, Trace

_GEMM = TYPES.index("gemm")
# The precision path of a GEMM from the dtype of its first matrix operand (fp32: tf32 if the kernel says so).
_PATHS = {"c10::BFloat16": "bf16", "c10::Half": "fp16", "c10::Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8"}


def op_flops(name: str, dims: list) -> float | None:
    """FLOPs (2 per multiply-add) of one matmul op from its "Input Dims"; None if it is not one we know."""
    def dims_of(i: int) -> list[int] | None:
        d = dims[i] if len(dims) > i else None
        return d if isinstance(d, list) and d and all(isinstance(x, int) for x in d) else None

    op = name.removeprefix("aten::")
    first = 1 if op in ("addmm", "baddbmm") else 0   # addmm(bias, a, b), baddbmm(input, a, b)
    a, b = dims_of(first), dims_of(first + 1)
    if a is None or b is None:
        return None
    if op in ("mm", "addmm") and len(a) == len(b) == 2 and a[1] == b[0]:
        return 2.0 * a[0] * a[1] * b[1]
    if op in ("bmm", "baddbmm") and len(a) == len(b) == 3 and a[0] == b[0] and a[2] == b[1]:
        return 2.0 * a[0] * a[1] * a[2] * b[2]
    if op == "linear" and len(b) == 2 and a[-1] == b[1]:       # x [..., K] @ weight [N, K]^T
        return 2.0 * math.prod(a) * b[0]
    if op == "matmul" and len(a) >= 2 and len(b) == 2 and a[-1] == b[0]:
        return 2.0 * math.prod(a) * b[1]
    return None


def _path(dtypes: str, kernel: str) -> str:
    try:
        first = json.loads(dtypes)[0] if dtypes else ""
    except (ValueError, IndexError, TypeError):
        first = ""
    if first in _PATHS:
        return _PATHS[first]
    if first == "float":
        return "tf32" if "tf32" in kernel.lower() else "fp32"
    return "other"


def gemm_work(trace: Trace, windows: Windows) -> dict:
    """FLOPs and GPU time of the matmul ops launched inside the windows, per precision path.

    Returns {"flops", "gemm_us", "ops", "kernels", "by_path": {path: {"flops", "us", "ops"}},
    "shapes": [{"op", "dims", "path", "count", "flops"}], "unattributed_kernels", "unattributed_us"}."""
    return per_windows(trace, "gemm_work", windows, _gemm_work)


def dominant_path(work: dict) -> str:
    """The precision path of a gemm_work result with the most GEMM kernel time."""
    return max(work["by_path"], key=lambda p: work["by_path"][p]["us"])


def _gemm_work(trace: Trace, windows: Windows) -> dict:
    rows = window_gpu_rows(trace, windows)
    rows = rows[trace.kind[rows] == KERNEL]
    ops = _op_of_kernel(trace, rows)
    is_gemm = row_types(trace, rows) == _GEMM
    by_path: dict[str, dict] = {}
    shapes: Counter = Counter()
    flops_of: dict[tuple, float] = {}
    counted = np.zeros(rows.size, dtype=bool)
    for op in np.unique(ops[is_gemm & (ops >= 0)]).tolist():
        shape_id = int(trace.shape[op])
        try:
            dims = json.loads(trace.shapes[shape_id]) if shape_id >= 0 else None
        except ValueError:
            dims = None
        flops = op_flops(trace.name_of(op), dims) if isinstance(dims, list) else None
        if flops is None:
            continue
        mine = ops == op
        counted |= mine
        kernel = trace.name_of(int(rows[mine & is_gemm][0]))
        dtype_id = int(trace.dtype[op])
        path = _path(trace.dtypes[dtype_id] if dtype_id >= 0 else "", kernel)
        slot = by_path.setdefault(path, {"flops": 0.0, "us": 0.0, "ops": 0})
        slot["flops"] += flops
        slot["us"] += float(trace.dur[rows[mine]].sum())
        slot["ops"] += 1
        key = (trace.name_of(op), trace.shapes[shape_id], path)
        shapes[key] += 1
        flops_of[key] = flops
    stray = is_gemm & ~counted
    return {
        "flops": sum(p["flops"] for p in by_path.values()),
        "gemm_us": sum(p["us"] for p in by_path.values()),
        "ops": sum(p["ops"] for p in by_path.values()),
        "kernels": int(counted.sum()),
        "by_path": by_path,
        "shapes": [{"op": k[0], "dims": k[1], "path": k[2], "count": n, "flops": flops_of[k]}
                   for k, n in shapes.most_common(8)],
        "unattributed_kernels": int(stray.sum()),
        "unattributed_us": float(trace.dur[rows[stray]].sum()),
    }
