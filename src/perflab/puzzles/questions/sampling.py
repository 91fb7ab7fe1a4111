"""Analyses for questions about sampled profiles (py-spy, `<variant>.pyspy.json.gz`) and the measured
cost of Python profilers (`profilers.json`, puzzles/evidence/overhead.py).

Registered into questions.ANALYSES on import (the package finds it by discovery).
"""
from __future__ import annotations

from typing import Any

from perflab.errors import PerflabError
from perflab.puzzles.questions.registry import Computed, analysis
from perflab.puzzles.engine.spec import display_path

LOOP = "sampled_steps"  # puzzles.loop_target's measured loop: only its samples count


def sampled(ev: Any, variant: str) -> dict[str, Any]:
    """hot_functions of the variant's py-spy profile (the measured loop only), computed once."""
    cache = ev.__dict__.setdefault("_sampled", {})
    if variant not in cache:
        from perflab.analysis.steps.sampling import hot_functions
        from perflab.puzzles.evidence.sampling import PySpy, pyspy_file

        hot = hot_functions(PySpy().replay(ev, variant), within=LOOP)
        if not hot["functions"]:
            raise PerflabError(f"{display_path(pyspy_file(ev.folder, variant))} has no samples under {LOOP}()")
        cache[variant] = hot
    return cache[variant]


def _source(variant: str) -> str:
    return f"the recorded {variant} py-spy profile (samples under {LOOP})"


@analysis
def pyspy_hot_function(ev: Any, variant: str = "slow") -> Computed:
    """file.py:function with the most own samples in the variant's py-spy profile."""
    hot = sampled(ev, variant)
    rows = hot["functions"]
    evidence = {r["function"]: f"self {r['self_pct']:.1f} %, total {r['total_pct']:.1f} %" for r in rows[:6]}
    evidence["samples in the loop"] = f"{hot['kept_pct']:.0f} % of {hot['samples']}"
    return Computed(rows[0]["function"], evidence, _source(variant), alternatives=tuple(r["function"] for r in rows[1:]))


@analysis
def pyspy_share(ev: Any, variant: str = "slow", function: str = "", kind: str = "self") -> Computed:
    """Percent of the loop's samples in a function (own: innermost frame; total: anywhere on the stack);
    the hottest function when none is named."""
    if kind not in ("self", "total"):
        raise PerflabError(f"pyspy_share kind {kind!r} must be self or total")
    hot = sampled(ev, variant)
    rows = hot["functions"] if kind == "self" else hot["by_total"]
    name = function or hot["functions"][0]["function"]
    row = next((r for r in rows if r["function"] == name), None)
    if row is None:
        raise PerflabError(f"{name} has no samples of its own in the recorded {variant} py-spy profile")
    return Computed(row[f"{kind}_pct"], {"function": name, f"{kind} %": row[f"{kind}_pct"],
                                         "samples": hot["samples"], "kept % (in the loop)": hot["kept_pct"]},
                    _source(variant))


# ---- the profiler-overhead table ----------------------------------------------------------------

def profilers(ev: Any) -> list[dict[str, Any]]:
    from perflab.puzzles.evidence.overhead import TABLE_FILE, Overhead

    data = Overhead().replay(ev)
    if not data.get("rows"):
        raise PerflabError(f"no {TABLE_FILE} in {display_path(ev.folder)}: {ev._record_hint()}")
    return data["rows"]


def _measured(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("status") == "ok" and r.get("kind") != "none" and "factor" in r]


def _table(rows: list[dict[str, Any]]) -> dict[str, str]:
    out = {}
    for r in rows:
        if "factor" in r:
            out[r["profiler"]] = f"{r['factor']:.2f}x ({r['overhead_pct']:+.1f} %, spread {r['spread_pct']:.0f} %)"
        else:
            out[r["profiler"]] = r.get("status", "")
    return out


@analysis
def profiler_extreme(ev: Any, which: str = "most", stat: str = "profiler") -> Computed:
    """The profiler with the most or least overhead in profilers.json: its name, kind, or factor."""
    if which not in ("most", "least") or stat not in ("profiler", "kind", "factor"):
        raise PerflabError("profiler_extreme: which must be most|least, stat profiler|kind|factor")
    rows = profilers(ev)
    measured = _measured(rows)
    if not measured:
        raise PerflabError("profilers.json has no measured profiler")
    pick = (max if which == "most" else min)(measured, key=lambda r: r["factor"])
    others = tuple(r["profiler"] for r in measured if r is not pick)
    return Computed(pick[stat], _table(rows), "the recorded profiler table (profilers.json)",
                    alternatives=others if stat == "profiler" else ())


@analysis
def profiler_factor(ev: Any, profiler: str) -> Computed:
    """Loop time under one profiler (the row whose name starts with `profiler`) / without any."""
    rows = profilers(ev)
    row = next((r for r in rows if r["profiler"] == profiler), None) or \
        next((r for r in rows if r["profiler"].startswith(profiler)), None)
    if row is None or "factor" not in row:
        raise PerflabError(f"profilers.json has no measured row {profiler!r}")
    return Computed(row["factor"], {"profiler": row["profiler"], **_table([row]),
                                    "median ms per step": row["median_ms"], "repeats (ms)": str(row["rounds_ms"])},
                    "the recorded profiler table (profilers.json)")
