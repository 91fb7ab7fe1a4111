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


UNEVEN = 1.1   # a mean step this far above the median: the steps differ (a serving loop's prefills among decodes)


def typical_step_us(trace: Trace, windows: Windows) -> float:
    """The step the per-step figures (totals over the steps) are read against: the median step, unless the steps
    differ so much that the mean is UNEVEN x the median or more; then the mean, so that no step time printed is
    shorter than the GPU time the same report gives per step. Else the windows' total."""
    if windows.kind != "steps":
        return windows.total
    times = step_times(trace)
    median, mean = float(np.median(times)), float(np.mean(times))
    return mean if mean >= UNEVEN * median else median


def step_spread(trace: Trace, windows: Windows) -> dict:
    """Mean, p90 and p99 of the step times and the clock they were read on (analysis/steps/gpu_clock.py)."""
    from perflab.analysis.steps.windows import profiler_steps

    out: dict = {"clock": "gpu" if profiler_steps(trace).on_gpu else "host"}
    if windows.kind != "steps":
        return out
    times = step_times(trace)
    if times.size:
        out.update({"step_time_mean_ms": float(times.mean()) / 1e3,
                    "step_time_p90_ms": float(np.percentile(times, 90)) / 1e3,
                    "step_time_p99_ms": float(np.percentile(times, 99)) / 1e3})
    return out


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
        **step_spread(trace, windows),
    }
