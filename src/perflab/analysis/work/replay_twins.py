"""A replayed kernel priced by its eager twin: the same kernel, launched outside a graph elsewhere in the trace.

A CUDA-graph replay runs kernels that carry no op; where the trace does not hold the graph's capture, nothing says
what they compute. But a program often runs the same kernel eagerly too (a serving engine's prefill runs eager
while its decodes replay graphs, a warm-up runs the model before capturing it). A kernel is its code (name) and its
launch shape (grid and block): the same name, grid and block launched eagerly by an op with recorded shapes did
that op's work, and so does its replay. Only where every eager launch of that (name, grid, block) came from ops of
one signature (name, shapes, dtypes, scalars): a shape the grid does not tell apart (a grid-stride loop over a
longer tensor) stays unpriced. Pure: no torch.
"""
from __future__ import annotations

import numpy as np

from perflab.trace.model import KERNEL, Trace


def eager_twins(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """For kernel rows replayed from graphs: the op row of an eager launch of the same (name, grid, block) whose
    eager launches all share one op signature; -1 where there is none or they differ."""
    from perflab.analysis.work.kernel_patterns import _op_of_kernel

    out = np.full(rows.size, -1, dtype=np.int64)
    if not rows.size:
        return out
    kernels = np.flatnonzero(trace.kind == KERNEL)
    ops = _op_of_kernel(trace, kernels)
    eager = ops >= 0
    eager[eager] = trace.shape[ops[eager]] >= 0
    kernels, ops = kernels[eager], ops[eager]
    if not kernels.size:
        return out
    key = _key(trace, kernels)
    signature = np.stack([trace.name[ops], trace.shape[ops], trace.dtype[ops], trace.concrete[ops]], axis=1)
    order = np.lexsort((*signature.T[::-1], key))
    key, signature, ops = key[order], signature[order], ops[order]
    first = np.r_[True, key[1:] != key[:-1]]
    starts = np.flatnonzero(first)
    ends = np.r_[starts[1:], key.size] - 1
    one_signature = (signature[starts] == signature[ends]).all(axis=1)   # sorted: first == last means all equal
    wanted = _key(trace, rows)
    pos = np.searchsorted(key[starts], wanted)
    pos = np.clip(pos, 0, starts.size - 1)
    hit = (key[starts][pos] == wanted) & one_signature[pos]
    out[hit] = ops[starts[pos[hit]]]
    return out


def _key(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """(name, grid, block) as one integer per row (grid and block are products of their dims)."""
    name = trace.name[rows].astype(np.int64)
    grid = np.clip(trace.grid[rows], -1, (1 << 31) - 1).astype(np.int64) + 1
    block = np.clip(trace.block[rows], -1, (1 << 11) - 1).astype(np.int64) + 1
    return (name << 43) | (grid << 12) | block
