"""What a folder of one program's evidence holds: Kineto traces (level 1), Nsight Compute reports (level 2),
memory snapshots (level 3) and, when `perflab investigate` wrote it, its record `investigation.json`.

Files are recognized by content (trace.sniff), not by name; a report and its raw-page CSV export (same stem) are
one report. The record is data from a file: every field is checked for its type and anything else is dropped.
"""
from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perflab.errors import UnreadableInput
from perflab.trace import sniff

RECORD = "investigation.json"
RECORD_SCHEMA = "perflab.investigation-run/1"
BY_HAND = "by-hand"     # the subfolder the report's by-hand commands write into (not read as evidence)
_STEM = re.compile(r"(\.ncu-rep|\.csv)?(\.gz)?$")


_PACKAGE = Path(__file__).resolve().parents[1]  # src/perflab
_PYTHON = re.compile(r"python[0-9.]*(\.exe)?")
_IN_PACKAGE = re.compile(r"(?:^|[/\\])perflab[/\\]((?:catalog|puzzles|workloads)[/\\].+)$")


def runnable_here(program: list[str] | None) -> list[str] | None:
    """A program recorded on another machine, as this one can run it: an interpreter that is not here becomes
    this Python (which has perflab), and a file of perflab's own (a puzzle's workload) the installed one."""
    if not program:
        return program
    out = list(program)
    if not os.path.exists(out[0]) and _PYTHON.fullmatch(Path(out[0]).name):
        out[0] = sys.executable
    for i, arg in enumerate(out):
        if os.path.isabs(arg) and not os.path.exists(arg) and (m := _IN_PACKAGE.search(arg)):
            mine = _PACKAGE / m.group(1)
            out[i] = str(mine) if mine.exists() else arg
    return out


def by_hand(folder: Path) -> Path:
    """Where the report's by-hand commands write: beside the evidence, unless the evidence ships inside the
    installed package (a puzzle's recording), which is no place to write: then ./perflab-by-hand/NAME."""
    try:
        inside = folder.resolve().is_relative_to(_PACKAGE)
    except OSError:
        inside = False
    return Path("perflab-by-hand") / folder.name if inside else folder / BY_HAND


@dataclass
class Evidence:
    folder: Path
    traces: list[Path] = field(default_factory=list)
    ncu: list[Path] = field(default_factory=list)          # one file per report (the .ncu-rep when both exist)
    snapshots: list[Path] = field(default_factory=list)
    record: dict[str, Any] = field(default_factory=dict)
    other: list[tuple[str, str]] = field(default_factory=list)   # (file name, why it was not read)

    @property
    def kinds(self) -> int:
        return sum(bool(x) for x in (self.traces, self.ncu, self.snapshots))


def scan(folder: str | Path) -> Evidence:
    """Sort the files directly in `folder` by kind."""
    folder = Path(folder)
    ev = Evidence(folder)
    reports: dict[str, Path] = {}
    for f in sorted(p for p in folder.iterdir() if not p.name.startswith(".")):
        if not f.is_file():
            if f.name == BY_HAND:
                continue
            ev.other.append((f.name, "a folder (only the files directly in it are read)"))
            continue
        if f.name == RECORD:
            ev.record = read_record(f)
            continue
        if f.suffix == ".log":
            continue  # the programs' output, for people
        try:
            kind = sniff.sniff(f)
        except UnreadableInput as exc:
            ev.other.append((f.name, str(exc).removeprefix(f"{f}: ")))
            continue
        if kind == sniff.KINETO:
            ev.traces.append(f)
        elif kind in (sniff.NCU, sniff.NCU_CSV):
            stem = report_stem(f.name)
            if stem not in reports or kind == sniff.NCU:  # the report itself over its CSV export
                reports[stem] = f
        elif kind == sniff.MEMORY:
            ev.snapshots.append(f)
        else:
            ev.other.append((f.name, f"not evidence perflab reads here ({kind})"))
    ev.ncu = [reports[k] for k in sorted(reports)]
    return ev


def report_stem(name: str) -> str:
    """'ncu-1-k.ncu-rep', 'ncu-1-k.csv', 'ncu-1-k.ncu-rep.gz' -> 'ncu-1-k' (a report and its CSV export are one)."""
    return _STEM.sub("", name)


def is_investigation(folder: str | Path) -> bool:
    """A folder the merged report reads: it holds perflab investigate's record, or Nsight Compute reports or memory
    snapshots (a folder of Kineto traces alone is a job's ranks: the doctor's folder report)."""
    folder = Path(folder)
    if not folder.is_dir():
        return False
    if (folder / RECORD).is_file():
        return True
    ev = scan(folder)
    return bool(ev.ncu or ev.snapshots)


def read_record(path: Path) -> dict[str, Any]:
    """perflab investigate's record, or {} (with no error: the folder's evidence still stands) when it is not one."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    if not isinstance(doc, dict) or doc.get("schema") != RECORD_SCHEMA:
        return {}
    return doc


def text(value: Any, default: str = "") -> str:
    return value if isinstance(value, str) else default


def number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def section(record: dict[str, Any], *keys: str) -> dict[str, Any]:
    """record[k1][k2]... when each is a dict, else {}."""
    cur: Any = record
    for k in keys:
        cur = cur.get(k) if isinstance(cur, dict) else None
    return cur if isinstance(cur, dict) else {}
