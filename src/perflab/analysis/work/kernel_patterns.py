"""Kernel sequences a trace alone can show: unfused elementwise chains, dequantize-then-GEMM pairs."""
from __future__ import annotations

import re

import numpy as np

from perflab.analysis.work.kernels import TYPES, row_types, window_gpu_rows
from perflab.analysis.steps.links import launch_of, match
from perflab.analysis.steps.windows import Windows, profiler_steps
from perflab.trace.model import CPU_OP, KERNEL, Trace, distinct

_ELEMENTWISE = TYPES.index("elementwise")
_GEMM = (TYPES.index("gemm"), TYPES.index("conv"))
_DEQUANT_NAME = re.compile(r"dequant|unpack|int4|_w4a|awq|gptq|marlin_repack|float8_to|fp8_to|e4m3_to|to_bf16|to_fp16", re.I)
_CAST_OP = re.compile(r"dequant|_to_copy|aten::to$|copy_|type_as|convert|quantized|torchao|fp8|float8|int8|int4", re.I)
# A dtype-converting copy kernel. Alone it says nothing (activations are cast too); it is a dequantize
# when it moves a weight-sized tensor: at least HEAVY_CAST of the time of the GEMM it feeds. This is how
# kernels replayed from a CUDA graph are judged: they have no CPU op (no dtypes) in the trace.
_CAST_KERNEL = re.compile(r"direct_copy_kernel|LoadWithCast|StoreWithCast|_to_copy|convert_|cast_", re.I)
HEAVY_CAST = 0.5
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


def _step_of(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """ProfilerStep index per GPU row, by the time it was launched (0 everywhere without steps)."""
    steps = profiler_steps(trace)
    if not len(steps):
        return np.zeros(rows.size, dtype=np.int64)
    links = launch_of(trace)[rows]
    when = np.where(links >= 0, trace.ts[np.maximum(links, 0)], trace.ts[rows])
    return np.searchsorted(steps.launch_start, when, side="right") - 1


def elementwise_chains(trace: Trace, windows: Windows, min_length: int = 3) -> dict:
    """Runs of consecutive elementwise kernels on one stream with the same launch shape (grid, block).

    A run never spans two profiler steps (by launch time): one fused kernel per step, repeated step
    after step, is the same work done again, not a chain that fusion could shorten."""
    chains: list[np.ndarray] = []
    shape_known = False
    for seq in _stream_sequences(trace, windows):
        types = row_types(trace, seq)
        grid, block = trace.grid[seq], trace.block[seq]
        shape_known |= bool((grid > 0).any())
        ok = (types == _ELEMENTWISE) & (grid > 0) & (block > 0)
        same_as_prev = np.zeros(seq.size, dtype=bool)
        same_as_prev[1:] = ok[1:] & ok[:-1] & (grid[1:] == grid[:-1]) & (block[1:] == block[:-1])
        step = _step_of(trace, seq)
        same_as_prev[1:] &= step[1:] == step[:-1]
        starts = np.flatnonzero(ok & ~same_as_prev)
        if starts.size == 0:
            continue
        run = np.cumsum(~same_as_prev) - 1           # run index of every kernel
        lengths = np.bincount(run, minlength=run[-1] + 1)[run[starts]]
        for s, n in zip(starts[lengths >= min_length].tolist(), lengths[lengths >= min_length].tolist()):
            chains.append(seq[s:s + n])
    times = np.array([float(trace.dur[c].sum()) for c in chains])
    sizes = np.array([c.size for c in chains], dtype=np.float64)
    return {"chains": chains, "chain_count": len(chains), "kernels": int(sizes.sum()),
            "mean_length": float(sizes.mean()) if chains else 0.0, "time_us": float(times.sum()),
            "saving_us": float((times * (sizes - 1) / np.maximum(sizes, 1)).sum()), "shape_known": shape_known}


def _op_of_kernel(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """The CPU op (row) a kernel was launched from, by External id; -1 if unknown."""
    ops = np.flatnonzero((trace.kind == CPU_OP) & (trace.external_id >= 0))
    return match(trace.external_id[ops], ops, trace.external_id[rows], last=True)


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
    """Dequantize/convert kernels that run right before a GEMM on the same stream.

    The time counts the dequantize kernel and the elementwise kernels between it and the GEMM (the
    scale multiply of a weight-only format: `w.to(bf16) * scale`)."""
    pairs = []
    between: list[int] = []
    gemms = 0
    for seq in _stream_sequences(trace, windows):
        types = row_types(trace, seq)
        is_gemm = np.isin(types, _GEMM)
        gemms += int(is_gemm.sum())
        strict = _is_dequant(trace, seq, types)
        cast = trace.name_table_mask(lambda n: _CAST_KERNEL.search(n) is not None)[seq] & ~is_gemm
        for i in np.flatnonzero(strict | cast).tolist():
            ahead = np.flatnonzero(is_gemm[i + 1:i + 1 + lookahead])
            if ahead.size == 0:
                continue
            g = i + 1 + int(ahead[0])
            if not strict[i] and trace.dur[seq[i]] < HEAVY_CAST * trace.dur[seq[g]]:
                continue  # a light cast (an activation), not a weight being widened
            pairs.append(int(seq[i]))
            between.extend(int(seq[j]) for j in range(i + 1, g) if types[j] == _ELEMENTWISE)
    rows = np.array(pairs, dtype=np.int64)
    extra = np.array(sorted(set(between) - set(pairs)), dtype=np.int64)
    return {"rows": rows, "pairs": int(rows.size), "gemms": gemms,
            "time_us": float(trace.dur[rows].sum() + trace.dur[extra].sum()) if rows.size else 0.0,
            "scale_kernels": int(extra.size),
            "names": sorted({trace.name_of(r) for r in pairs})[:5]}
