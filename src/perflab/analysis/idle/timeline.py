"""GPU busy and idle time per device, per stream and per ProfilerStep."""
from __future__ import annotations

import numpy as np

from perflab.analysis.idle.intervals import Coverage, merge
from perflab.analysis.steps.links import gpu_rows
from perflab.analysis.steps.windows import Windows, profiler_steps, trace_origin
from perflab.trace.model import KERNEL, Trace, distinct


def _busy(trace: Trace, rows: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return Coverage(*merge(trace.ts[rows], trace.end[rows])).covered(lo, hi)


def busy_idle(trace: Trace, windows: Windows) -> dict:
    """Busy % of the windows per device and per (device, stream); per step for the whole GPU."""
    rows = gpu_rows(trace)
    total = windows.total
    devices, streams = [], []
    for dev in distinct(trace.device[rows]).tolist():
        on = rows[trace.device[rows] == dev]
        busy = float(_busy(trace, on, windows.start, windows.end).sum())
        devices.append({"device": int(dev), "busy_us": busy, "idle_us": total - busy,
                        "busy_pct": 100.0 * busy / total if total else 0.0})
        for sid in distinct(trace.stream[on]).tolist():
            sel = on[trace.stream[on] == sid]
            b = float(_busy(trace, sel, windows.start, windows.end).sum())
            streams.append({"device": int(dev), "stream": int(sid), "busy_us": b,
                            "busy_pct": 100.0 * b / total if total else 0.0, "ops": int(sel.size)})
    return {"window_us": total, "devices": devices, "streams": streams, "steps": per_step(trace)}


def per_step(trace: Trace) -> list[dict]:
    """Every ProfilerStep: its duration, GPU busy % inside it and kernels that ran in it."""
    steps = profiler_steps(trace)
    if not len(steps):
        return []
    rows = gpu_rows(trace)
    busy = _busy(trace, rows, steps.start, steps.end)
    kernels = rows[trace.kind[rows] == KERNEL]
    k_start = np.sort(trace.ts[kernels])
    n_kernels = np.searchsorted(k_start, steps.end) - np.searchsorted(k_start, steps.start)
    origin = trace_origin(trace)
    dur = steps.end - steps.start
    return [{"step": int(n), "ts_us": float(s - origin), "dur_us": float(d),
             "gpu_busy_pct": 100.0 * float(b) / float(d) if d > 0 else 0.0, "kernels": int(k)}
            for n, s, d, b, k in zip(steps.number.tolist(), steps.start.tolist(), dur.tolist(),
                                     busy.tolist(), n_kernels.tolist())]
