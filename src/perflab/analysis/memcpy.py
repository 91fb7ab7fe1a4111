"""Host<->device copies: direction, pinned or pageable host memory, achieved bandwidth."""
from __future__ import annotations

import re

import numpy as np

from perflab.analysis.intervals import length, overlap_length
from perflab.analysis.kernels import window_gpu_rows
from perflab.analysis.windows import Windows, per_windows
from perflab.trace.model import KERNEL, MEMCPY, Trace

DIRECTIONS = ("h2d", "d2h", "d2d")
_DIRECTION = (
    ("h2d", re.compile(r"HtoD|Host\s*->\s*Device|HostToDevice", re.I)),
    ("d2h", re.compile(r"DtoH|Device\s*->\s*Host|DeviceToHost|Device\s*->\s*Pageable|Device\s*->\s*Pinned", re.I)),
    ("d2d", re.compile(r"DtoD|Device\s*->\s*Device|DeviceToDevice|PtoP|Peer", re.I)),
)


def direction(name: str) -> str:
    for key, pattern in _DIRECTION:
        if pattern.search(name):
            return key
    return "other"


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
    compute = (trace.ts[kernels], trace.end[kernels])
    out = {}
    for d in DIRECTIONS + ("other",):
        sel = rows[dirs == d] if rows.size else rows
        if d == "other" and sel.size == 0:
            continue
        page = sel[pageable[dirs == d]] if rows.size else sel
        nbytes = np.nan_to_num(trace.nbytes[sel], nan=0.0)
        total = float(trace.dur[sel].sum())
        busy = length(trace.ts[sel], trace.end[sel])
        page_busy = length(trace.ts[page], trace.end[page])
        out[d] = {
            "count": int(sel.size),
            "bytes": int(nbytes.sum()),
            "total_us": total,
            "pageable_count": int(page.size),
            "pageable_us": float(trace.dur[page].sum()),
            "pageable_bytes": int(np.nan_to_num(trace.nbytes[page], nan=0.0).sum()),
            "gbps": float(nbytes.sum() / total / 1e3) if total > 0 else 0.0,
            "exposed_us": busy - overlap_length((trace.ts[sel], trace.end[sel]), compute),
            "pageable_exposed_us": page_busy - overlap_length((trace.ts[page], trace.end[page]), compute),
        }
    return out


def copies(trace: Trace, windows: Windows) -> dict:
    return per_windows(trace, "copies", windows, _copies)
