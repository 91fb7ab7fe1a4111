"""Analyses for questions about what is alive at the memory peak of a recorded snapshot
(analysis.gpu_memory.memory_peak over `<variant>.memory.json.gz`).

Registered into questions.ANALYSES on import (the package finds it by discovery).
"""
from __future__ import annotations

from typing import Any

from perflab.errors import PerflabError
from perflab.puzzles.questions.registry import Computed, analysis

STATS = ("function", "mb", "pct", "peak_mb", "blocks")


@analysis
def memory_peak_owner(ev: Any, variant: str = "slow", stat: str = "function") -> Computed:
    """The Python function (file.py:function) whose allocations hold the most memory at the peak of
    allocated bytes: its name, MB, % of the peak, block count; or the peak itself (peak_mb)."""
    from perflab.analysis.gpu_memory.memory_peak import live_at_peak
    from perflab.puzzles.questions.memory import snapshot_path
    from perflab.trace.snapshot import load

    if stat not in STATS:
        raise PerflabError(f"memory_peak_owner stat {stat!r} must be one of {', '.join(STATS)}")
    cache = ev.__dict__.setdefault("_peaks", {})
    if variant not in cache:
        cache[variant] = live_at_peak(load(snapshot_path(ev, variant)))
    peak = cache[variant]
    if not peak["by_function"]:
        raise PerflabError(f"the recorded {variant} memory snapshot has no allocation history")
    top = peak["by_function"][0]
    value = peak["peak_allocated_mb"] if stat == "peak_mb" else top[stat]
    evidence = {r["function"]: f"{r['mb']:.1f} MB in {r['blocks']} blocks ({r['pct']:.0f} %)"
                for r in peak["by_function"][:5]}
    evidence["peak allocated MB"] = peak["peak_allocated_mb"]
    return Computed(value, evidence, f"the recorded {variant} memory snapshot, replayed to its peak",
                    alternatives=tuple(r["function"] for r in peak["by_function"][1:]) if stat == "function" else ())
