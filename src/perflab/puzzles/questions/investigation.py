"""Analyses over a recorded walk (`perflab investigate` per variant; puzzles with tools = ["investigate"]).

They read `<variant>.investigation/` through evidence/investigation.py's replay, i.e. doctor.investigation.build,
the merged report `perflab doctor FOLDER` prints: its headline (where to act first) and the levels behind it.
"""
from __future__ import annotations

from typing import Any

from perflab.errors import PerflabError
from perflab.puzzles.questions.registry import Computed, analysis

FIELDS = ("scope", "level", "finding", "function", "ncu_finding", "gain_pct")


def walked(ev: Any, variant: str) -> Any:
    cache = getattr(ev, "_walk_cache", None)
    if cache is None:
        cache = ev._walk_cache = {}
    if variant not in cache:
        from perflab.puzzles.evidence.investigation import Investigate

        cache[variant] = Investigate().replay(ev, variant)
    return cache[variant]


def _finding_id(entry: dict[str, Any] | None) -> str | None:
    return (entry or {}).get("id") if isinstance(entry, dict) else None


@analysis
def investigation_headline(ev: Any, variant: str = "slow", field: str = "scope") -> Computed:
    """A field of the walk's headline: `scope` (system | kernel | memory | healthy), `level` (1-3), `finding` (the
    id of the leading level's top finding: the timeline's, the top kernel's ncu finding, or memory's), `function`
    (the kernel it names), `ncu_finding` (the top profiled kernel's ncu finding, whatever leads), `gain_pct`."""
    if field not in FIELDS:
        raise PerflabError(f"investigation_headline: field must be one of {', '.join(FIELDS)} (got {field!r})")
    inv = walked(ev, variant)
    head = inv.headline
    kernels = inv.level(2).get("kernels") or []
    top = kernels[0] if kernels else {}
    level_finding = {1: _finding_id(inv.level(1).get("finding")), 2: _finding_id(top.get("finding")),
                     3: _finding_id(inv.level(3).get("finding"))}
    values = {"scope": head["scope"], "level": head["level"],
              "finding": "healthy" if head["scope"] == "healthy" else level_finding.get(head["level"]),
              "function": head.get("function"), "ncu_finding": _finding_id(top.get("finding")),
              "gain_pct": head.get("gain_pct")}
    value = values[field]
    if value is None:
        raise PerflabError(f"the {variant} walk's headline has no {field} ({head['text']})")
    return Computed(value, {"headline": head["text"], "headline_scope": head["scope"],
                            "headline_level": head["level"], "top_kernel": top.get("function"),
                            "level1_finding": level_finding[1], "top_kernel_ncu_finding": level_finding[2]},
                    f"artifacts/{variant}.investigation (perflab doctor on the folder)")
