"""Annotation ranges on the host against the GPU work they launched (NVTX / record_function semantics).

A `record_function("stage")` (or an NVTX push/pop) range is opened and closed by the host thread: its
duration is the CPU time between the two calls. Around asynchronous GPU work that is the time to
*enqueue* the kernels, not the time they run; a range that happens to hold a synchronizing call
(`.cpu()`, `.item()`) instead absorbs the wait for everything queued before it. The GPU time of a
stage is found through the correlation ids: each kernel's launching runtime call (cudaLaunchKernel,
cudaMemcpyAsync, ...) lies inside the range on the range's thread. `stage_times` gives both clocks per
range name. Pure: numpy over the trace model.
"""
from __future__ import annotations

import numpy as np

from perflab.analysis.idle.intervals import length
from perflab.analysis.steps.links import gpu_rows, launch_of
from perflab.analysis.steps.windows import Windows
from perflab.trace.model import STEP_RE, USER_ANNOTATION, Trace


def range_rows(trace: Trace, windows: Windows, names: list[str] | tuple[str, ...] | None = None) -> np.ndarray:
    """Host user-annotation rows (not ProfilerStep#N) that start inside the windows, optionally by name."""
    wanted = set(names) if names else None
    ok = trace.name_table_mask(lambda n: STEP_RE.fullmatch(n.strip()) is None and (wanted is None or n in wanted))
    rows = np.flatnonzero(ok & (trace.kind == USER_ANNOTATION) & (trace.dur > 0))
    return rows[windows.contains(trace.ts[rows])] if rows.size else rows


def stage_times(trace: Trace, windows: Windows, names: list[str] | tuple[str, ...] | None = None) -> dict:
    """Per range name: host (CPU) time and the GPU time of the work launched inside it.

    Returns {"steps": n, "stages": [{name, count, cpu_us, gpu_us, gpu_busy_us, gpu_span_us, ops,
    cpu_ms_per_step, gpu_ms_per_step}]} in order of first appearance. gpu_us sums the durations of the
    kernels, copies and memsets whose launch call lies inside the range (same thread); gpu_busy_us is
    their union; gpu_span_us sums, per range instance, first GPU start to last GPU end (what Nsight
    Systems draws as the range projected onto the GPU rows).
    """
    rows = range_rows(trace, windows, names)
    gpu = gpu_rows(trace)
    launch = launch_of(trace)[gpu]
    linked = launch >= 0
    gpu, launch = gpu[linked], launch[linked]
    l_ts, l_tid = trace.ts[launch], trace.tid[launch]
    steps = max(len(windows.steps), 1)
    by_name: dict[str, dict] = {}
    for r in rows[np.argsort(trace.ts[rows], kind="stable")].tolist():
        name = trace.name_of(r)
        lo, hi = float(trace.ts[r]), float(trace.end[r])
        inside = gpu[(l_tid == trace.tid[r]) & (l_ts >= lo) & (l_ts < hi)]
        s = by_name.setdefault(name, {"name": name, "count": 0, "cpu_us": 0.0, "gpu_us": 0.0, "gpu_busy_us": 0.0,
                                      "gpu_span_us": 0.0, "ops": 0})
        s["count"] += 1
        s["cpu_us"] += hi - lo
        if inside.size:
            s["gpu_us"] += float(trace.dur[inside].sum())
            s["gpu_busy_us"] += length(trace.ts[inside], trace.end[inside])
            s["gpu_span_us"] += float(trace.end[inside].max() - trace.ts[inside].min())
            s["ops"] += int(inside.size)
    stages = list(by_name.values())
    for s in stages:
        s["cpu_ms_per_step"] = s["cpu_us"] / 1e3 / steps
        s["gpu_ms_per_step"] = s["gpu_us"] / 1e3 / steps
    return {"steps": steps, "stages": stages}
