"""Host-device synchronization: runtime calls that block the CPU until the GPU catches up."""
from __future__ import annotations

import re
from collections import Counter

import numpy as np

from perflab.analysis.steps.windows import Windows, per_windows
from perflab.trace.model import CPU_OP, RUNTIME, SYNC, Trace

# Runtime calls that block the host until device work completes. cudaMemcpy (not Async) is
# synchronous; cudaMemcpyAsync only blocks for pageable memory and is handled as a copy.
_SYNC_CALL = re.compile(
    r"(cuda|hip)(Device|Stream|Event|Ctx|Thread)Synchronize|cu(Ctx|Stream|Event)Synchronize(_v\d+)?|"
    r"(cuda|hip)Memcpy(2D|3D)?(ToSymbol|FromSymbol|Peer|DtoH|HtoD|WithStream)?|cuMemcpy(DtoH|HtoD|DtoD)?(_v\d+)?"
)
# Operators whose result the host needs, so they synchronize (named in evidence).
SYNC_OPS = ("aten::item", "aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero", "aten::equal",
            "aten::masked_select", "aten::unique", "aten::_unique2", "aten::repeat_interleave")


def is_sync_call(name: str) -> bool:
    return _SYNC_CALL.fullmatch(name) is not None


def sync_rows(trace: Trace) -> np.ndarray:
    """Rows of blocking calls, sorted by start: named ones, and those the profiler recorded a host-blocking
    synchronization for (a SYNC row with the call's correlation id: Nsight Systems records them for any API
    that waited). Falls back to sync ops when the sync calls were not traced: only those that copied from the
    device when runtime calls were (.item() of a CPU tensor waits for nothing)."""
    def compute() -> np.ndarray:
        calls = np.flatnonzero((trace.kind == RUNTIME) & (trace.name_table_mask(is_sync_call) | _recorded_waits(trace)))
        if calls.size == 0:
            calls = np.flatnonzero((trace.kind == CPU_OP) & trace.name_table_mask(
                lambda n: n in ("aten::_local_scalar_dense",)))
            copies = np.flatnonzero((trace.kind == RUNTIME) & trace.name_table_mask(lambda n: "Memcpy" in n))
            if (trace.kind == RUNTIME).any():
                calls = calls[[bool(((trace.tid[copies] == trace.tid[c]) & (trace.ts[copies] >= trace.ts[c])
                                     & (trace.ts[copies] <= trace.end[c])).any()) for c in calls.tolist()]]
        return calls[np.argsort(trace.ts[calls], kind="stable")]
    return trace.cached("sync_rows", compute)


def _recorded_waits(trace: Trace) -> np.ndarray:
    """Per row: a runtime call that a host-blocking SYNC record names (not a stream waiting on an event)."""
    out = np.zeros(len(trace), dtype=bool)
    waits = np.flatnonzero((trace.kind == SYNC) & (trace.correlation >= 0) &
                           ~trace.name_table_mask(lambda n: n == "Stream Wait Event"))
    if waits.size == 0:
        return out
    calls = np.flatnonzero((trace.kind == RUNTIME) & (trace.correlation >= 0) &
                           ~trace.name_table_mask(lambda n: "Query" in n))  # a query returns at once
    out[calls[np.isin(trace.correlation[calls], trace.correlation[waits])]] = True
    return out


def origin_op(trace: Trace, rows: np.ndarray) -> list[str | None]:
    """For each sync call, the synchronizing operator it runs inside (aten::item, ...), if any."""
    ops = np.flatnonzero((trace.kind == CPU_OP) & trace.name_table_mask(lambda n: n in SYNC_OPS))
    out: list[str | None] = [None] * rows.size
    if ops.size == 0 or rows.size == 0:
        return out
    # Outermost sync op containing the call on the same thread (aten::item contains _local_scalar_dense).
    ops = ops[np.lexsort((-trace.dur[ops], trace.ts[ops]))]
    for k, r in enumerate(rows.tolist()):
        i = np.searchsorted(trace.ts[ops], trace.ts[r], side="right")
        for j in range(i - 1, max(i - 8, -1), -1):
            o = ops[j]
            if trace.tid[o] == trace.tid[r] and trace.end[o] >= trace.end[r]:
                out[k] = trace.name_of(o)
    return out


def _sync_summary(trace: Trace, windows: Windows) -> dict:
    rows = sync_rows(trace)
    rows = rows[windows.contains(trace.ts[rows])]
    names = Counter(trace.name_of(r) for r in rows.tolist())
    names.update(o for o in origin_op(trace, rows) if o)
    n_steps = len(windows.steps) if windows.steps else 1
    wait = float(trace.dur[rows].sum())
    return {
        "count": int(rows.size),
        "per_step": rows.size / n_steps,
        "names": dict(names.most_common()),
        "wait_us": wait,
        "wait_pct": 100.0 * wait / windows.total if windows.total else 0.0,
    }


def sync_summary(trace: Trace, windows: Windows) -> dict:
    return per_windows(trace, "sync_summary", windows, _sync_summary)
