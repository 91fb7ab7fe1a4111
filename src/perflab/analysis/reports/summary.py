"""The evidence summary the puzzle engine and `perflab run` read (see docs/CONTRACTS.md)."""
from __future__ import annotations

import numpy as np

from perflab.analysis.idle.gaps import analyze_gaps
from perflab.analysis.work.kernels import kernel_breakdown
from perflab.analysis.idle.launches import launch_stats
from perflab.analysis.idle.memcpy import DIRECTIONS, copies
from perflab.analysis.idle.syncs import sync_summary
from perflab.analysis.steps.windows import Windows, analysis_windows, profiler_steps, step_times
from perflab.trace.model import Trace


def step_time_us(trace: Trace, windows: Windows) -> float:
    """The analysed step's time: the median profiler step where the windows are the steps, else the windows'
    total (the one number of the evidence summary most rules read, without its kernel classification)."""
    return float(np.median(step_times(trace))) if windows.kind == "steps" else windows.total


def evidence_summary(trace: Trace, windows: Windows | None = None) -> dict:
    windows = windows or analysis_windows(trace)
    n_steps = len(profiler_steps(trace)) if windows.kind == "steps" else (1 if windows.kind == "step" else 0)
    span_us = windows.hi - windows.lo
    step_us = step_time_us(trace, windows)
    gaps = analyze_gaps(trace, windows)
    launches = launch_stats(trace, windows)
    breakdown = kernel_breakdown(trace, windows, top=50)
    kernel_names = [k for k in breakdown["by_name"] if k["type"] not in ("memcpy", "memset")][:10]
    kernel_total = sum(v["total_us"] for t, v in breakdown["by_type"].items() if t not in ("memcpy", "memset"))
    copy = copies(trace, windows)
    syncs = sync_summary(trace, windows)
    return {
        "device": str(trace.meta.get("device_name", "")),
        "steps": int(n_steps),
        "step_time_ms": step_us / 1e3,
        "span_ms": span_us / 1e3,
        "gpu_busy_pct": 100.0 * gaps.busy_us / gaps.window_us if gaps.window_us else 0.0,
        "kernels_per_step": float(launches["kernels_per_step"]),
        "mean_kernel_us": float(launches["kernel_us"]["mean"]),
        "top_kernels": [{"name": k["name"], "total_us": k["total_us"], "count": k["count"],
                         "pct": 100.0 * k["total_us"] / kernel_total if kernel_total else 0.0}
                        for k in kernel_names],
        "copies": {d: {key: copy[d][key] for key in ("count", "bytes", "total_us", "pageable_count", "gbps")}
                   for d in DIRECTIONS},
        "syncs": {"count": syncs["count"], "per_step": float(syncs["per_step"]), "names": syncs["names"]},
    }
