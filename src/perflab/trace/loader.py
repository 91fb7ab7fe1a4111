"""Load any timeline artifact perflab reads into the trace model, recognized by content.

A Kineto trace (.json/.json.gz), a folder of per-rank Kineto traces, an Nsight Systems SQLite export,
or an Nsight Systems report (.nsys-rep/.qdrep, exported through nsys). `load_timeline` gives one Trace
(every process of an nsys export; a folder's first rank); `load_timeline_ranks` one Trace per rank or
process, as the doctor reads them.
"""
from __future__ import annotations

from pathlib import Path

from perflab.errors import UnreadableInput
from perflab.trace import sniff
from perflab.trace.model import Trace

TIMELINE_KINDS = (sniff.KINETO, sniff.KINETO_DIR, sniff.NSYS, sniff.NSYS_REP)
_WHAT = {sniff.NCU: "an Nsight Compute report", sniff.NCU_CSV: "an Nsight Compute CSV export",
         sniff.MEMORY: "a memory snapshot", sniff.SQLITE: "an SQLite file that is not an Nsight Systems export",
         sniff.UNKNOWN: "not a trace"}


def timeline_kind(path: str | Path) -> str:
    """The sniffed kind, or a one-line error for anything that is not a timeline."""
    path = Path(path)
    kind = sniff.sniff(path)
    if kind not in TIMELINE_KINDS:
        raise UnreadableInput(f"{path}: {_WHAT.get(kind, kind)}; give a Kineto trace (.json/.json.gz), a folder of "
                              "them, or an Nsight Systems export (.sqlite, or .nsys-rep through nsys)")
    return kind


def _nsys_path(path: Path, kind: str) -> Path:
    if kind == sniff.NSYS_REP:
        from perflab.trace.nsight_systems.nsys_rep import sqlite_for

        return sqlite_for(path)
    return path


def load_timeline(path: str | Path, *, nvtx_steps: str | None = "auto") -> Trace:
    path = Path(path)
    kind = timeline_kind(path)
    if kind in (sniff.NSYS, sniff.NSYS_REP):
        from perflab.trace import nsys

        return nsys.load(_nsys_path(path, kind), nvtx_steps=nvtx_steps)
    from perflab.trace import kineto

    return kineto.load_ranks(path)[0] if kind == sniff.KINETO_DIR else kineto.load(path)


def load_timeline_ranks(path: str | Path, *, nvtx_steps: str | None = "auto") -> list[Trace]:
    path = Path(path)
    kind = timeline_kind(path)
    if kind in (sniff.NSYS, sniff.NSYS_REP):
        from perflab.trace import nsys

        return nsys.load_ranks(_nsys_path(path, kind), nvtx_steps=nvtx_steps)
    from perflab.trace import kineto

    return kineto.load_ranks(path)
