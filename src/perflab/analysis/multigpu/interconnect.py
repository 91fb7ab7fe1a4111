"""The interconnect lesson, read from a recorded sweep: the same all-reduce under different NCCL settings.

scripts/record.py interconnect records one all-reduce bus-bandwidth sweep
(perflab.toolkit.bench.allreduce, nccl-tests conventions) per setting into one JSON
(schema perflab.interconnect-sweep/1): NCCL's default path (NVLink peer-to-peer where the GPUs have it),
NCCL_P2P_DISABLE=1 (through host memory), and the ring and tree algorithms (NCCL_ALGO). This module
lines the settings up size by size: bus bandwidth and time of each, and each against the default.
"""
from __future__ import annotations

import math
from typing import Any

from perflab.errors import PerflabError

SCHEMA = "perflab.interconnect-sweep/1"
SETTINGS: dict[str, dict[str, str]] = {
    "default": {},
    "p2p_off": {"NCCL_P2P_DISABLE": "1"},
    "ring": {"NCCL_ALGO": "Ring"},
    "tree": {"NCCL_ALGO": "Tree"},
}


def check(doc: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("settings"), dict):
        raise PerflabError(f"not an interconnect sweep (schema {SCHEMA})")
    return doc


def rows_of(doc: dict[str, Any], setting: str) -> dict[int, dict[str, Any]]:
    """The setting's sweep rows by message size (bytes); a setting that did not run raises with its error."""
    s = check(doc)["settings"].get(setting)
    if s is None:
        raise PerflabError(f"the sweep has no setting {setting!r} (settings: {', '.join(check(doc)['settings'])})")
    if "sweep" not in s:
        raise PerflabError(f"setting {setting!r} has no measurements: {s.get('error', 'not recorded')}")
    return {int(r["bytes"]): r for r in s["sweep"]["rows"]}


def point(doc: dict[str, Any], setting: str, size: int, field: str = "busbw_gbps") -> float:
    """One measurement: the row of the setting at the message size closest to `size` (bytes, by ratio:
    the sweep's sizes grow geometrically)."""
    rows = rows_of(doc, setting)
    nearest = min(rows, key=lambda b: abs(math.log(b / max(size, 1))))
    if field not in rows[nearest]:
        raise PerflabError(f"sweep rows have no field {field!r}")
    return float(rows[nearest][field])


def table(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Per message size: each recorded setting's busbw (GB/s) and time (µs), and its busbw over the default's."""
    ran = [n for n, s in check(doc)["settings"].items() if "sweep" in s]
    if not ran:
        raise PerflabError("no setting of the interconnect sweep has measurements")
    sizes = sorted(set().union(*(rows_of(doc, n).keys() for n in ran)))
    out = []
    for size in sizes:
        row: dict[str, Any] = {"bytes": size}
        for n in ran:
            r = rows_of(doc, n).get(size)
            if r is None:
                continue
            row[f"{n}_busbw_gbps"] = r["busbw_gbps"]
            row[f"{n}_time_us"] = r["time_us"]
        base = row.get("default_busbw_gbps")
        for n in ran:
            if n != "default" and base and row.get(f"{n}_busbw_gbps") is not None:
                row[f"{n}_vs_default"] = row[f"{n}_busbw_gbps"] / base
        out.append(row)
    return out


def transport(doc: dict[str, Any], setting: str) -> list[str]:
    """The NCCL_DEBUG lines the recording kept for a setting that name its transport (via P2P/SHM/...)."""
    s = check(doc)["settings"].get(setting) or {}
    return [x for x in s.get("transport_lines", []) if x.startswith("via ")]
