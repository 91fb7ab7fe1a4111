"""How much copy and communication time is hidden behind compute."""
from __future__ import annotations

import numpy as np

from perflab.analysis.idle.intervals import length, merge, overlap_length
from perflab.analysis.work.kernels import TYPES, row_types, window_gpu_rows
from perflab.analysis.steps.windows import Windows
from perflab.trace.model import Trace, distinct

_COMPUTE = [TYPES.index(t) for t in ("gemm", "conv", "attention", "elementwise", "reduction", "other")]


def _overlap(trace: Trace, rows: np.ndarray, compute: tuple) -> dict:
    spans = (trace.ts[rows], trace.end[rows])
    busy = length(*spans)
    hidden = overlap_length(spans, compute)
    streams = distinct(trace.stream[rows]).tolist()
    return {"time_us": busy, "overlapped_us": hidden, "exposed_us": busy - hidden,
            "overlap_pct": 100.0 * hidden / busy if busy else 0.0, "streams": streams}


def overlaps(trace: Trace, windows: Windows) -> dict:
    rows = window_gpu_rows(trace, windows)
    types = row_types(trace, rows)
    comp = rows[np.isin(types, _COMPUTE)]
    compute = merge(trace.ts[comp], trace.end[comp])   # once: each overlap below would merge it again
    copy = rows[types == TYPES.index("memcpy")]
    comm = rows[types == TYPES.index("communication")]
    return {
        "compute_us": length(*compute),
        "compute_streams": distinct(trace.stream[comp]).tolist(),
        "copy": _overlap(trace, copy, compute),
        "comm": _overlap(trace, comm, compute),
    }
