"""The doctor on an Nsight Systems export: the trace rules on its model, with what nsys said about the capture.

A capture with no GPU rows gets no findings: its verdict says why there are none (tracing off, the
capture cut short, records never flushed), from the export itself (trace/nsight_systems/nsys_capture.py).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from perflab.doctor.finding import Report
from perflab.trace import nsys
from perflab.trace.nsight_systems.nsys_capture import capture_notes, capture_summary
from perflab.trace.model import GPU_WORK_KINDS, Trace
from perflab.trace.nsight_systems.nsys_names import AUTO


def load(path: str | Path, *, nvtx_steps: str | None = AUTO) -> list[Trace]:
    return nsys.load_ranks(path, nvtx_steps=nvtx_steps)


def no_gpu_work(trace: Trace) -> Report | None:
    """The report of a capture with no GPU rows (its verdict says why), or None: the trace rules' to judge."""
    if np.isin(trace.kind, GPU_WORK_KINDS).any():
        return None
    capture = trace.meta.get("capture") or {}
    reason = capture.get("no_gpu_work") or "the export holds no kernel, copy or memset row"
    source = {"path": trace.meta.get("path", ""), "kind": "nsys", "device": trace.meta.get("device_name", ""),
              "ranks": [0], "rank": 0, "window": {"kind": "none", "steps": []},
              "capture": capture_summary(trace), "notes": capture_notes(trace)}
    verdict = f"No GPU activity in this capture: {reason}."
    return Report(source=source, verdict=verdict, findings=[],
                  analyses={"capture": {"api_calls": capture.get("api_calls", {}),
                                        "launch_calls": capture.get("launch_calls", 0)}})
