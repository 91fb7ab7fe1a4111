"""The two sides of `perflab diff`, each read and diagnosed: a trace (load_run, for analysis.reports.compare) or an
Nsight Compute report (load_ncu_side, for analysis.ncu.ncu_compare)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from perflab.analysis.reports.compare import Run
from perflab.errors import PerflabError
from perflab.history import resolve
from perflab.trace.ncu import NcuProfile


def load_run(ref: str | Path, *, rank: int | None = None, nvtx_steps: str | None = "auto") -> Run:
    """Load and diagnose one side: a Kineto trace file, a folder of per-rank traces, an Nsight Systems export
    (.sqlite; .nsys-rep through nsys), or `run:N`."""
    from perflab.doctor import diagnose_trace
    from perflab.trace import sniff
    from perflab.trace.loader import load_timeline_ranks

    path, label = resolve(ref)
    kind = sniff.sniff(path)
    if kind not in (sniff.KINETO, sniff.KINETO_DIR, sniff.NSYS, sniff.NSYS_REP):
        what = {sniff.NCU: "an Nsight Compute report", sniff.NCU_CSV: "an Nsight Compute CSV export",
                sniff.MEMORY: "a memory snapshot", sniff.SQLITE: "an SQLite file that is not an Nsight Systems "
                "export"}.get(kind, "not a trace")
        raise PerflabError(f"{path}: perflab diff compares traces (torch.profiler or Nsight Systems); this is {what}")
    traces = load_timeline_ranks(path, nvtx_steps=nvtx_steps)
    no_gpu = (traces[0].meta.get("capture") or {}).get("no_gpu_work")
    if no_gpu:
        raise PerflabError(f"{path}: no GPU activity to compare: {no_gpu}")
    report = diagnose_trace(traces, rank=rank)
    trace = next(t for t in traces if t.rank == report.source.get("rank", traces[0].rank))
    return Run(label=label, trace=trace, report=report)


def load_ncu_side(path: str | Path) -> tuple[NcuProfile, Any]:
    """Read an .ncu-rep or its raw-page CSV (recognized by content) and diagnose it."""
    from perflab.doctor.ncu import diagnose_profile
    from perflab.trace.ncu import load

    profile = load(path)
    return profile, diagnose_profile(profile)
