"""Host<->device copies: direction, pinned or pageable host memory, achieved bandwidth."""
from __future__ import annotations

import re

import numpy as np

from perflab.analysis.idle.copy_deps import copy_dependencies
from perflab.analysis.idle.intervals import length, merge, overlap_length
from perflab.analysis.work.kernels import first_match, window_gpu_rows
from perflab.analysis.steps.links import launch_of, launch_rows
from perflab.analysis.idle.syncs import sync_rows
from perflab.analysis.steps.windows import Windows, per_windows
from perflab.trace.model import KERNEL, MEMCPY, Trace, distinct

DIRECTIONS = ("h2d", "d2h", "d2d")
_DIRECTION = (
    ("h2d", re.compile(r"HtoD|Host\s*->\s*Device|HostToDevice", re.I)),
    ("d2h", re.compile(r"DtoH|Device\s*->\s*Host|DeviceToHost|Device\s*->\s*Pageable|Device\s*->\s*Pinned", re.I)),
    ("d2d", re.compile(r"DtoD|Device\s*->\s*Device|DeviceToDevice|PtoP|Peer", re.I)),
)


def direction(name: str) -> str:
    return first_match(_DIRECTION, name)


def is_pageable(name: str) -> bool:
    return "pageable" in name.lower()


def copy_rows(trace: Trace, windows: Windows) -> np.ndarray:
    rows = window_gpu_rows(trace, windows)
    return rows[trace.kind[rows] == MEMCPY]


def _copies(trace: Trace, windows: Windows) -> dict:
    """Per direction: count, bytes, time, pageable share, achieved GB/s, time not hidden by kernels."""
    rows = copy_rows(trace, windows)
    dir_table = np.array([direction(n) for n in trace.names], dtype=object)
    dirs = dir_table[trace.name[rows]] if rows.size else np.zeros(0, dtype=object)
    pageable = trace.name_table_mask(is_pageable)[rows]
    kernels = window_gpu_rows(trace, windows)
    kernels = kernels[trace.kind[kernels] == KERNEL]
    compute = merge(trace.ts[kernels], trace.end[kernels])   # once: every overlap below would merge it again
    is_async = _not_waited_for(trace, rows)
    deps = copy_dependencies(trace, rows, kernels, dirs.tolist())
    consumers = {"consumers_sought": deps["consumers_sought"], "consumers_found": deps["consumers_found"]}

    def exposed(sel: np.ndarray) -> float:
        return length(trace.ts[sel], trace.end[sel]) - overlap_length((trace.ts[sel], trace.end[sel]), compute)

    out = {}
    for d in DIRECTIONS + ("other",):
        sel = rows[dirs == d] if rows.size else rows
        if d == "other" and sel.size == 0:
            continue
        page = sel[pageable[dirs == d]] if rows.size else sel
        asynchronous = sel[is_async[dirs == d]] if rows.size else sel
        nbytes = np.nan_to_num(trace.nbytes[sel], nan=0.0)
        total = float(trace.dur[sel].sum())
        out[d] = {
            "count": int(sel.size),
            "bytes": int(nbytes.sum()),
            "total_us": total,
            "pageable_count": int(page.size),
            "pageable_us": float(trace.dur[page].sum()),
            "pageable_bytes": int(np.nan_to_num(trace.nbytes[page], nan=0.0).sum()),
            "gbps": float(nbytes.sum() / total / 1e3) if total > 0 else 0.0,
            "exposed_us": exposed(sel),
            "pageable_exposed_us": exposed(page),
            "async_exposed_us": exposed(asynchronous),
            # exposed copy time that compute free of a data dependency on the copy could hide (copy_deps)
            "independent_us": float(deps["independent_us"][dirs == d].sum()) if rows.size else 0.0,
            "async_independent_us": float(deps["independent_us"][(dirs == d) & is_async].sum()) if rows.size else 0.0,
            "unknown_us": float(deps["unknown_us"][dirs == d].sum()) if rows.size else 0.0,
            **consumers,
        }
    return out


def _not_waited_for(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Copies the host did not wait for: the launching call returned before the copy ended, and the
    host launched other work before its next synchronizing call."""
    calls = launch_of(trace)[rows]
    known = calls >= 0
    call_end = trace.end[np.maximum(calls, 0)]
    out = known & (call_end < trace.end[rows] - 1.0)
    syncs = sync_rows(trace)
    launches = launch_rows(trace)
    for tid in distinct(trace.tid[calls[known]]).tolist():
        mine = syncs[trace.tid[syncs] == tid]
        on = np.flatnonzero(out & (trace.tid[np.maximum(calls, 0)] == tid))
        if mine.size == 0 or on.size == 0:
            continue
        next_sync = np.searchsorted(trace.ts[mine], call_end[on] - 1e-6)
        sync_ts = np.where(next_sync < mine.size, trace.ts[mine[np.minimum(next_sync, mine.size - 1)]], np.inf)
        starts = np.sort(trace.ts[launches[trace.tid[launches] == tid]])
        after = np.searchsorted(starts, call_end[on] - 1e-6)
        next_launch = np.where(after < starts.size, starts[np.minimum(after, starts.size - 1)], np.inf)
        out[on[sync_ts < next_launch]] = False
    return out


def copies(trace: Trace, windows: Windows) -> dict:
    return per_windows(trace, "copies", windows, _copies)
