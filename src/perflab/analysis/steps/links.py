"""Links between events: which rows are GPU work, and which runtime call launched each GPU op."""
from __future__ import annotations

import numpy as np

from perflab.trace.model import GPU_WORK_KINDS, RUNTIME, Trace, distinct


def gpu_rows(trace: Trace) -> np.ndarray:
    return trace.cached("gpu_rows", lambda: np.flatnonzero(np.isin(trace.kind, GPU_WORK_KINDS)))


def match(keys: np.ndarray, rows: np.ndarray, wanted: np.ndarray, *, last: bool = False) -> np.ndarray:
    """For each wanted key: the row (of `rows`, keyed by `keys`) with that key, -1 if none or negative.

    With several rows per key, the first one in `rows` order (or the last with last=True)."""
    out = np.full(wanted.size, -1, dtype=np.int64)
    if rows.size == 0 or wanted.size == 0:
        return out
    order = np.argsort(keys, kind="stable")
    keys, rows = keys[order], rows[order]
    pos = np.searchsorted(keys, wanted, side="right") - 1 if last else np.searchsorted(keys, wanted)
    pos = np.clip(pos, 0, keys.size - 1)
    ok = (wanted >= 0) & (keys[pos] == wanted)
    out[ok] = rows[pos[ok]]
    return out


def launch_of(trace: Trace) -> np.ndarray:
    """Per row: the runtime row that launched it (same correlation id), -1 if none (or not GPU work)."""
    def compute() -> np.ndarray:
        out = np.full(len(trace), -1, dtype=np.int64)
        gpu = gpu_rows(trace)
        rt = np.flatnonzero((trace.kind == RUNTIME) & (trace.correlation >= 0))
        out[gpu] = match(trace.correlation[rt], rt, trace.correlation[gpu])
        return out
    return trace.cached("launch_of", compute)


def launch_rows(trace: Trace) -> np.ndarray:
    """Runtime rows that launched some GPU op (kernel launches, async memcpy/memset, graph launches)."""
    def compute() -> np.ndarray:
        links = launch_of(trace)
        return distinct(links[links >= 0])
    return trace.cached("launch_rows", compute)


def launch_calls_us(trace: Trace, rows: np.ndarray) -> float:
    """The host's time in the runtime calls that launched these GPU rows, each call once (a graph launch runs many
    kernels)."""
    links = launch_of(trace)[rows]
    return float(trace.dur[distinct(links[links >= 0])].sum())
