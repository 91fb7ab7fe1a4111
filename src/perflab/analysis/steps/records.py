"""Is the GPU side of the trace complete? Kernel launches that have no kernel record.

A profiler that stops before it has read the GPU's timestamps drops those kernels (Nsight Systems
says "incomplete CUPTI events dropped"); the host keeps launching while the trace shows the GPU idle.
Read naively, that stretch is idle GPU time that never happened. `launch_records` counts the launch
calls (cudaLaunchKernel and kin) with no kernel under their correlation id, and finds a tail of them:
from `tail_start_us` on, the trace holds no kernel of any launch. The analysis windows stop there.
"""
from __future__ import annotations

import re

import numpy as np

from perflab.analysis.steps.links import launch_of
from perflab.trace.model import KERNEL, RUNTIME, Trace

_KERNEL_LAUNCH = re.compile(r"(cuda|cu|hip)Launch(Kernel|CooperativeKernel)\w*")
TAIL_MIN = 10  # fewer unrecorded launches at the end are noise (a failed launch, a last call cut off)


def kernel_launch_rows(trace: Trace) -> np.ndarray:
    """Runtime rows that launch one kernel each (graph launches, host functions and launches captured into a CUDA
    graph excluded), by start."""
    def compute() -> np.ndarray:
        from perflab.analysis.steps.graph_capture import captured_launches

        rows = np.flatnonzero((trace.kind == RUNTIME) &
                              trace.name_table_mask(lambda n: _KERNEL_LAUNCH.fullmatch(n) is not None))
        rows = rows[~np.isin(rows, captured_launches(trace))]
        return rows[np.argsort(trace.ts[rows], kind="stable")]
    return trace.cached("kernel_launch_rows", compute)


def launch_records(trace: Trace) -> dict:
    """{launches, unrecorded, tail, tail_start_us}: kernel launch calls, those with no kernel row,
    the run of them after the last launch that has one, and when that run starts (None: no such tail)."""
    def compute() -> dict:
        rows = kernel_launch_rows(trace)
        out = {"launches": int(rows.size), "unrecorded": 0, "tail": 0, "tail_start_us": None}
        if rows.size == 0:
            return out
        links = launch_of(trace)
        kernels = np.flatnonzero(trace.kind == KERNEL)
        recorded = np.zeros(len(trace), dtype=bool)
        recorded[links[kernels][links[kernels] >= 0]] = True
        has = recorded[rows]
        out["unrecorded"] = int((~has).sum())
        last = int(np.flatnonzero(has)[-1]) if has.any() else -1
        tail = rows.size - 1 - last
        if tail >= max(TAIL_MIN, 0.01 * rows.size):
            out.update(tail=int(tail), tail_start_us=float(trace.ts[rows[last + 1]]))
        return out
    return trace.cached("launch_records", compute)


def records_end(trace: Trace) -> float:
    """Where the recorded GPU side ends: the start of an unrecorded tail of launches, else +inf."""
    start = launch_records(trace)["tail_start_us"]
    return np.inf if start is None else start


def record_notes(trace: Trace) -> list[str]:
    """What the reader should know about the completeness of the GPU records, in one sentence each."""
    notes = []
    rec = launch_records(trace)
    origin = float(trace.ts.min()) if len(trace) else 0.0
    if rec["tail_start_us"] is not None:
        notes.append(f"{rec['tail']:,} of {rec['launches']:,} kernel launches, all from "
                     f"{(rec['tail_start_us'] - origin) / 1e3:,.1f} ms on, have no kernel record (the profiler stopped "
                     "before reading them): the analysis ends there")
    rest = rec["unrecorded"] - rec["tail"]
    if rest > 0 and rest >= 0.01 * max(rec["launches"], 1):
        notes.append(f"{rest:,} kernel launches have no kernel record: GPU busy time is a lower bound")
    return notes


def trace_notes(trace: Trace) -> list[str]:
    """Every note on the completeness of a trace: the profiler's own (an nsys export's dropped events and
    warnings), then the launches with no GPU record."""
    notes = []
    if trace.meta.get("source") == "nsys":
        from perflab.trace.nsight_systems.nsys_capture import capture_notes

        notes = capture_notes(trace)
        why = (trace.meta.get("capture") or {}).get("no_gpu_work")
        if why:
            notes.insert(0, f"no GPU activity in this capture: {why}")
    # with no GPU record at all the GPU was not recorded (analysis/steps/recording.py says so), not cut short
    from perflab.analysis.steps.links import gpu_rows

    return notes + (record_notes(trace) if len(trace) and gpu_rows(trace).size else [])
