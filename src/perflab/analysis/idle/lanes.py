"""A busy/idle timeline per GPU stream, binned for drawing, and the time of every step.

The analysed windows (the ProfilerSteps, or the GPU span) are cut into `bins` equal slices from the
first window's start to the last one's end; per (device, stream) each slice gets the fraction of it
that the stream had GPU work running. Gaps between windows are marked so a drawing can grey them out.
"""
from __future__ import annotations

import numpy as np

from perflab.analysis.idle.intervals import Coverage
from perflab.analysis.work.kernels import TYPES, row_types
from perflab.analysis.steps.links import gpu_rows
from perflab.analysis.steps.windows import Windows, step_times, trace_origin
from perflab.trace.model import Trace, distinct

DEFAULT_BINS = 240


def stream_lanes(trace: Trace, windows: Windows, bins: int = DEFAULT_BINS) -> dict:
    """{t0_us, span_us, bin_us, in_window: [0/1 per bin], lanes: [{device, stream, busy_pct, top_type,
    busy: [fraction per bin]}], step_ms: [time per ProfilerStep]}. Times relative to the trace start."""
    lo, hi = windows.lo, windows.hi
    span = max(hi - lo, 0.0)
    bins = max(int(bins), 1)
    edges = lo + span * np.arange(bins + 1) / bins
    lefts, rights = edges[:-1], edges[1:]
    width = np.maximum(rights - lefts, 1e-12)
    in_window = Coverage(windows.start, windows.end).covered(lefts, rights) / width
    rows = gpu_rows(trace)
    lanes = []
    for dev in distinct(trace.device[rows]).tolist():
        on = rows[trace.device[rows] == dev]
        for sid in distinct(trace.stream[on]).tolist():
            sel = on[trace.stream[on] == sid]
            cov = Coverage(trace.ts[sel], trace.end[sel])
            busy = np.clip(cov.covered(lefts, rights) / width, 0.0, 1.0)
            inside = float(cov.covered(windows.start, windows.end).sum())
            types = row_types(trace, sel)
            weights = np.bincount(types, weights=trace.dur[sel], minlength=len(TYPES)) if sel.size else np.zeros(1)
            lanes.append({"device": int(dev), "stream": int(sid), "ops": int(sel.size),
                          "busy_pct": 100.0 * inside / windows.total if windows.total else 0.0,
                          "top_type": TYPES[int(np.argmax(weights))] if sel.size else "other",
                          "busy": [round(float(b), 3) for b in busy]})
    lanes.sort(key=lambda lane: (lane["device"], -lane["busy_pct"], lane["stream"]))
    return {"t0_us": lo - trace_origin(trace) if span else 0.0, "span_us": span, "bin_us": span / bins,
            "bins": bins, "in_window": [round(float(w), 3) for w in in_window], "lanes": lanes,
            "step_ms": [float(t) / 1e3 for t in step_times(trace)]}
