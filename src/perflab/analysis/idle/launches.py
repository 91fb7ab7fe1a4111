"""Kernel launches: which CPU runtime call launched each GPU op, and how launching performs."""
from __future__ import annotations

import numpy as np

from perflab.analysis.steps.links import launch_of
from perflab.analysis.steps.windows import Windows, per_windows, profiler_steps
from perflab.trace.model import KERNEL, Trace, distinct


def assigned_step(trace: Trace, windows: Windows, rows: np.ndarray) -> np.ndarray:
    """Window index per GPU row: by the time of its launch when known (the GPU may lag), else its own start."""
    links = launch_of(trace)[rows]
    t = np.where(links >= 0, trace.ts[np.maximum(links, 0)], trace.ts[rows])
    if windows.closed is None:
        return windows.index_of(t)
    # on the GPU's clock: a launch belongs to the steps the host had open; a GPU op whose launch the trace does not
    # hold, to the window it ran in (where the host opened the window the GPU still ran earlier work)
    linked = links >= 0
    idx = windows.ran_in(t)
    idx[linked] = windows.launched_in(t[linked])
    return idx


def _stats(values: np.ndarray) -> dict:
    if values.size == 0:
        return {"count": 0, "mean": 0.0, "p10": 0.0, "p50": 0.0, "p90": 0.0, "max": 0.0}
    p10, p50, p90 = np.percentile(values, [10, 50, 90])
    return {"count": int(values.size), "mean": float(values.mean()), "p10": float(p10), "p50": float(p50),
            "p90": float(p90), "max": float(values.max())}


def _launch_stats(trace: Trace, windows: Windows) -> dict:
    """Kernels per step, kernel durations, launch->start delay, CPU launch time vs GPU time."""
    kernels = np.flatnonzero(trace.kind == KERNEL)
    in_window = assigned_step(trace, windows, kernels) >= 0
    kernels = kernels[in_window]
    links = launch_of(trace)[kernels]
    linked = links >= 0
    delay = trace.ts[kernels[linked]] - trace.end[links[linked]]
    launch_calls = distinct(links[linked])
    cpu_launch_us = float(trace.dur[launch_calls].sum())
    gpu_kernel_us = float(trace.dur[kernels].sum())
    n_steps = len(windows.steps) if windows.kind in ("steps", "step") else 1
    durations = trace.dur[kernels]
    return {
        "kernels": int(kernels.size),
        "kernels_per_step": kernels.size / max(n_steps, 1),
        "kernel_us": _stats(durations),
        "launch_delay_us": _stats(delay),
        "cpu_launch_us": cpu_launch_us,
        "gpu_kernel_us": gpu_kernel_us,
        "cpu_launch_over_gpu": cpu_launch_us / gpu_kernel_us if gpu_kernel_us else 0.0,
        "linked_pct": 100.0 * linked.mean() if linked.size else 0.0,
        "steps_profiled": len(profiler_steps(trace)),
    }


def launch_stats(trace: Trace, windows: Windows) -> dict:
    return per_windows(trace, "launch_stats", windows, _launch_stats)
