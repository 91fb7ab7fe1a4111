"""Analyses over the seed puzzles' extra GPU records: GemLite's choice per batch size (`gemlite.json` of
the autotune puzzle, analysis/work/gemlite.py) and comparisons between two numbers of one recorded JSON table
(`configs.json` of fp8-weight-only: torchao's configurations measured one process each).

Registered into questions.ANALYSES on import (the package finds it by discovery).
"""
from __future__ import annotations

from typing import Any

from perflab.errors import PerflabError
from perflab.puzzles.questions.registry import Computed, analysis
from perflab.puzzles.engine.spec import display_path

GEMLITE_FILE = "gemlite.json"


def gemlite_record(ev: Any) -> dict[str, Any]:
    from perflab.analysis.work.gemlite import load

    cache = ev.__dict__.setdefault("_gemlite_cache", {})
    if "doc" not in cache:
        path = ev.folder / GEMLITE_FILE
        if not path.is_file():
            raise PerflabError(f"no GemLite record at {display_path(path)}: {ev._record_hint()}")
        cache["doc"] = load(path)
    return cache["doc"]


def _gl_source(doc: dict[str, Any]) -> str:
    return (f"the recorded GemLite {doc.get('gemlite', '?')} choices on {doc.get('gpu', '?')} "
            f"({GEMLITE_FILE}, config file {doc.get('config_file')})")


@analysis
def gemlite_switch_m(ev: Any, family: str) -> Computed:
    """The first batch size M at which GemLite selects kernel family `family` for the recorded layer."""
    from perflab.analysis.work.gemlite import switch_m, switches

    doc = gemlite_record(ev)
    m = switch_m(doc, family)
    ev_ = {"families by M": "; ".join(f"M >= {s['M']}: {s['family']}" for s in switches(doc)),
           "layer": f"N={doc['layer']['N']} K={doc['layer']['K']} W{doc['layer']['W_nbits']} group {doc['layer']['group_size']}"}
    return Computed(m, ev_, _gl_source(doc))


@analysis
def gemlite_holes(ev: Any) -> Computed:
    """How many batch sizes M in 1..4096 have no entry in GemLite's shipped config file for the layer
    (their first call autotunes)."""
    from perflab.analysis.work.gemlite import holes

    doc = gemlite_record(ev)
    found = holes(doc)
    count = sum(h["count"] for h in found)
    ev_ = {"M without a config-file entry": "; ".join(
        f"{h['first']}..{h['last']} ({h['family']}, bucket {', '.join(map(str, h['buckets']))})"
        if h["first"] != h["last"] else f"{h['first']} ({h['family']})" for h in found) or "none",
        "config file": doc.get("config_file")}
    return Computed(count, ev_, _gl_source(doc))


@analysis
def gemlite_call_value(ev: Any, m: int, field: str) -> Computed:
    """A field of the measured call at batch size `m`: family, config.SPLIT_K, config.BLOCK_SIZE_M, ctas,
    ctas_without_split_k, waves, autotune_s, candidates, gemlite_ms, bf16_ms, speedup_vs_bf16, source, ..."""
    from perflab.analysis.work.gemlite import call

    doc = gemlite_record(ev)
    row = call(doc, m)
    if row.get(field) is None:
        raise PerflabError(f"{GEMLITE_FILE}: the call at M={m} has no value {field!r}")
    ev_ = {k: row.get(k) for k in ("M", "family", "config", "source", "candidates", "autotune_s", "ctas", "waves",
                                   "gemlite_ms", "bf16_ms") if row.get(k) is not None}
    ev_[field] = row[field]
    return Computed(row[field], ev_, _gl_source(doc))


@analysis
def gemlite_forced_ratio(ev: Any, m: int) -> Computed:
    """At batch size `m`: time of the family GemLite picks / time of the neighbouring family forced by hand
    (> 1: GemLite's switch point is on the wrong side of `m` for this layer on this GPU)."""
    from perflab.analysis.work.gemlite import forced

    doc = gemlite_record(ev)
    f = forced(doc, m)
    ev_ = {"picked": f"{f['picked']} {f['picked_config']}: {f['picked_ms'] * 1e3:.1f} µs",
           "forced": f"{f['forced']} {f['forced_config']}: {f['forced_ms'] * 1e3:.1f} µs"
                     f"{' (config-file entry)' if f['forced_in_config_file'] else ''}"}
    return Computed(f["picked_over_forced"], ev_, _gl_source(doc))


@analysis
def artifact_pair(ev: Any, file: str, a: str, b: str, op: str = "ratio") -> Computed:
    """Two numbers of one recorded JSON file by dotted path: a / b (op "ratio") or a - b ("difference")."""
    from perflab.puzzles.questions.memory import artifact_field

    if op not in ("ratio", "difference"):
        raise PerflabError(f"artifact_pair: op must be 'ratio' or 'difference', not {op!r}")
    va, vb = artifact_field(ev, file=file, path=a).value, artifact_field(ev, file=file, path=b).value
    if not isinstance(va, (int, float)) or not isinstance(vb, (int, float)) or (op == "ratio" and not vb):
        raise PerflabError(f"{file}: {a} and {b} are not two numbers to compare")
    value = va / vb if op == "ratio" else va - vb
    return Computed(value, {a: va, b: vb, op: round(value, 4)}, f"the recorded {file}")
