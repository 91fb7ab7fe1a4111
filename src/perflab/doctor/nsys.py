"""The doctor on an Nsight Systems export: the trace rules on its model, with what nsys said about the capture.

A capture with no GPU rows gets no findings: its verdict says why there are none (tracing off, the
capture cut short, records never flushed), from the export itself (trace/nsys_capture.py).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from perflab.doctor.finding import Report
from perflab.trace import nsys
from perflab.trace.model import GPU_WORK_KINDS, Trace
from perflab.trace.nsys_names import AUTO


def diagnose_nsys(path: str | Path, *, rank: int | None = None, step: int | None = None,
                  nvtx_steps: str | None = AUTO) -> Report:
    return diagnose_nsys_traces(nsys.load_ranks(path, nvtx_steps=nvtx_steps), rank=rank, step=step)


def diagnose_nsys_traces(traces: list[Trace], *, rank: int | None = None, step: int | None = None) -> Report:
    from perflab.doctor import diagnose_trace

    trace = traces[0]
    capture = trace.meta.get("capture") or {}
    if not np.isin(trace.kind, GPU_WORK_KINDS).any():
        return _no_gpu_work(trace, capture)
    return diagnose_trace(traces, rank=rank, step=step)


def capture_summary(trace: Trace) -> dict:
    """The capture facts every output carries: versions, GPUs, nsys's warnings and dropped events."""
    capture = trace.meta.get("capture") or {}
    export = capture.get("export") or {}
    diag = capture.get("diagnostics") or {}
    settings = capture.get("settings") or {}
    return {"nsys_version": export.get("nsys_version"), "version_source": export.get("version_source"),
            "export_schema": export.get("schema_version"), "platform": export.get("platform"),
            "gpus": [d["name"] for d in capture.get("devices") or []],
            "dropped_events": diag.get("dropped_events", 0), "possibly_incomplete": diag.get("incomplete", False),
            "warnings": [m for m in diag.get("messages", []) if m["severity"] in ("warning", "error")],
            "duplicate_api_rows": capture.get("duplicate_api_rows", 0),
            "run_duration_ms": settings.get("run_duration_ms"), "nvtx_steps": trace.meta.get("nvtx_steps"),
            "pid": trace.meta.get("pid"), "no_gpu_work": capture.get("no_gpu_work")}


def capture_notes(trace: Trace) -> list[str]:
    """One line each: what nsys dropped or warned about, and rows the reader removed."""
    capture = trace.meta.get("capture") or {}
    diag = capture.get("diagnostics") or {}
    notes = []
    if diag.get("dropped_events"):
        said = "; ".join(m["text"][:300] for m in diag.get("messages", []) if m.get("dropped"))
        notes.append(f"nsys dropped {diag['dropped_events']:,} events during this capture; it says: {said}")
    seen = set()
    for m in diag.get("messages", []):
        if m["severity"] in ("warning", "error") and not m.get("dropped") and "Does the process use" not in m["text"] \
                and "might have not been started" not in m["text"] and m["text"] not in seen:
            seen.add(m["text"])
            notes.append(f"nsys {m['severity']}: {m['text'][:300]}")
    if capture.get("duplicate_api_rows"):
        notes.append(f"{capture['duplicate_api_rows']:,} CUDA API rows listed twice under one correlation id were "
                     "counted once")
    return notes[:8]


def _no_gpu_work(trace: Trace, capture: dict) -> Report:
    reason = capture.get("no_gpu_work") or "the export holds no kernel, copy or memset row"
    source = {"path": trace.meta.get("path", ""), "kind": "nsys", "device": trace.meta.get("device_name", ""),
              "ranks": [0], "rank": 0, "window": {"kind": "none", "steps": []},
              "capture": capture_summary(trace), "notes": capture_notes(trace)}
    verdict = f"No GPU activity in this capture: {reason}."
    return Report(source=source, verdict=verdict, findings=[],
                  analyses={"capture": {"api_calls": capture.get("api_calls", {}),
                                        "launch_calls": capture.get("launch_calls", 0)}})
