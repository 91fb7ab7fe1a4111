"""Links between events: which rows are GPU work, and which runtime call launched each GPU op."""
from __future__ import annotations

import numpy as np

from perflab.trace.model import GPU_WORK_KINDS, RUNTIME, Trace, distinct


def gpu_rows(trace: Trace) -> np.ndarray:
    return trace.cached("gpu_rows", lambda: np.flatnonzero(np.isin(trace.kind, GPU_WORK_KINDS)))


def launch_of(trace: Trace) -> np.ndarray:
    """Per row: the runtime row that launched it (same correlation id), -1 if none (or not GPU work)."""
    def compute() -> np.ndarray:
        out = np.full(len(trace), -1, dtype=np.int64)
        gpu = gpu_rows(trace)
        rt = np.flatnonzero((trace.kind == RUNTIME) & (trace.correlation >= 0))
        if gpu.size == 0 or rt.size == 0:
            return out
        corr = trace.correlation[rt]
        order = np.argsort(corr, kind="stable")
        corr, rt = corr[order], rt[order]
        want = trace.correlation[gpu]
        pos = np.searchsorted(corr, want)
        ok = (want >= 0) & (pos < corr.size)
        ok[ok] = corr[pos[ok]] == want[ok]
        out[gpu[ok]] = rt[pos[ok]]
        return out
    return trace.cached("launch_of", compute)


def launch_rows(trace: Trace) -> np.ndarray:
    """Runtime rows that launched some GPU op (kernel launches, async memcpy/memset, graph launches)."""
    def compute() -> np.ndarray:
        links = launch_of(trace)
        return distinct(links[links >= 0])
    return trace.cached("launch_rows", compute)
