"""Kernel sequences a trace alone can show: unfused elementwise chains, dequantize-then-GEMM pairs."""
from __future__ import annotations

import re

import numpy as np

from perflab.analysis.kernels import TYPES, row_types, window_gpu_rows
from perflab.analysis.windows import Windows
from perflab.trace.model import CPU_OP, KERNEL, Trace, distinct

_ELEMENTWISE = TYPES.index("elementwise")
_GEMM = (TYPES.index("gemm"), TYPES.index("conv"))
_DEQUANT_NAME = re.compile(r"dequant|unpack|int4|_w4a|awq|gptq|marlin_repack|float8_to|fp8_to|e4m3_to|to_bf16|to_fp16", re.I)
_CAST_OP = re.compile(r"dequant|aten::_to_copy|aten::to$|aten::copy_|aten::type_as|quantized_decomposed|torchao", re.I)
_NARROW_DTYPE = re.compile(r"signed char|unsigned char|int8|uint8|\bchar\b|Byte|Float8|float8|e4m3|e5m2|quint|qint|"
                           r"int4|uint4|bits", re.I)


def _stream_sequences(trace: Trace, windows: Windows) -> list[np.ndarray]:
    rows = window_gpu_rows(trace, windows)
    rows = rows[trace.kind[rows] == KERNEL]
    out = []
    for sid in distinct(trace.stream[rows]).tolist():
        on = rows[trace.stream[rows] == sid]
        out.append(on[np.argsort(trace.ts[on], kind="stable")])
    return out


def elementwise_chains(trace: Trace, windows: Windows, min_length: int = 3) -> dict:
    """Runs of consecutive elementwise kernels on one stream with the same launch shape (grid, block)."""
    chains = []
    shape_known = False
    for seq in _stream_sequences(trace, windows):
        types = row_types(trace, seq)
        grid, block = trace.grid[seq], trace.block[seq]
        shape_known |= bool((grid > 0).any())
        ok = (types == _ELEMENTWISE) & (grid > 0) & (block > 0)
        same_as_prev = np.zeros(seq.size, dtype=bool)
        same_as_prev[1:] = ok[1:] & ok[:-1] & (grid[1:] == grid[:-1]) & (block[1:] == block[:-1])
        starts = np.flatnonzero(ok & ~same_as_prev)
        for s in starts.tolist():
            e = s + 1
            while e < seq.size and same_as_prev[e]:
                e += 1
            if e - s >= min_length:
                chains.append(seq[s:e])
    total = sum(float(trace.dur[c].sum()) for c in chains)
    saving = sum(float(trace.dur[c].sum()) * (c.size - 1) / c.size for c in chains)
    lengths = [int(c.size) for c in chains]
    return {"chains": chains, "chain_count": len(chains), "kernels": int(sum(lengths)),
            "mean_length": float(np.mean(lengths)) if lengths else 0.0, "time_us": total,
            "saving_us": saving, "shape_known": shape_known}


def _op_of_kernel(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """The CPU op (row) a kernel was launched from, by External id; -1 if unknown."""
    ops = np.flatnonzero((trace.kind == CPU_OP) & (trace.external_id >= 0))
    out = np.full(rows.size, -1, dtype=np.int64)
    if ops.size == 0 or rows.size == 0:
        return out
    ext = trace.external_id[ops]
    order = np.argsort(ext, kind="stable")
    ext, ops = ext[order], ops[order]
    want = trace.external_id[rows]
    pos = np.searchsorted(ext, want, side="right") - 1
    ok = (want >= 0) & (pos >= 0) & (ext[np.maximum(pos, 0)] == want)
    out[ok] = ops[pos[ok]]
    return out


def _is_dequant(trace: Trace, rows: np.ndarray, types: np.ndarray) -> np.ndarray:
    by_name = trace.name_table_mask(lambda n: _DEQUANT_NAME.search(n) is not None)[rows]
    ops = _op_of_kernel(trace, rows)
    has_op = ops >= 0
    op_cast = np.zeros(rows.size, dtype=bool)
    op_cast[has_op] = trace.name_table_mask(lambda n: _CAST_OP.search(n) is not None)[ops[has_op]]
    narrow_table = np.array([bool(_NARROW_DTYPE.search(d.split(",")[0])) for d in trace.dtypes], dtype=bool)
    narrow = np.zeros(rows.size, dtype=bool)
    dtype_ids = np.where(has_op, trace.dtype[np.maximum(ops, 0)], -1)
    known = dtype_ids >= 0
    narrow[known] = narrow_table[dtype_ids[known]]
    return (by_name | (op_cast & narrow)) & ~np.isin(types, _GEMM)


def dequant_pairs(trace: Trace, windows: Windows, lookahead: int = 2) -> dict:
    """Dequantize/convert kernels that run right before a GEMM on the same stream."""
    pairs = []
    gemms = 0
    for seq in _stream_sequences(trace, windows):
        types = row_types(trace, seq)
        gemms += int(np.isin(types, _GEMM).sum())
        deq = np.flatnonzero(_is_dequant(trace, seq, types))
        for i in deq.tolist():
            ahead = types[i + 1:i + 1 + lookahead]
            if np.isin(ahead, _GEMM).any():
                pairs.append(int(seq[i]))
    rows = np.array(pairs, dtype=np.int64)
    return {"rows": rows, "pairs": int(rows.size), "gemms": gemms,
            "time_us": float(trace.dur[rows].sum()) if rows.size else 0.0,
            "names": sorted({trace.name_of(r) for r in pairs})[:5]}
