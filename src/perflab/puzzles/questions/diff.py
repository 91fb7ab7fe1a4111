"""Analyses for before/after questions: `perflab diff` (analysis.reports.compare) between two recorded traces
of one puzzle, by default the `before` trace (before.py) and the `slow` one (the change).

Registered into questions.ANALYSES on import (the package finds it by discovery).
"""
from __future__ import annotations

from typing import Any

from perflab.errors import PerflabError
from perflab.puzzles.questions.registry import Computed, analysis

STATS = ("before", "after", "change", "change_pct", "ratio")
STATUSES = ("appeared", "disappeared", "worse", "better", "unchanged")


def recorded_diff(ev: Any, before: str = "before", after: str = "slow") -> Any:
    """compare(load_run(before trace), load_run(after trace)): what `perflab diff BEFORE AFTER` prints."""
    cache = ev.__dict__.setdefault("_diffs", {})
    if (before, after) not in cache:
        from perflab.analysis.reports.compare import compare
        from perflab.doctor.sides import load_run

        cache[(before, after)] = compare(load_run(ev.trace_path(before)), load_run(ev.trace_path(after)))
    return cache[(before, after)]


def _source(before: str, after: str) -> str:
    return f"perflab diff of the recorded {before} and {after} traces"


@analysis
def diff_metric(ev: Any, metric: str = "step_time_ms", stat: str = "change_pct", before: str = "before",
                after: str = "slow") -> Computed:
    """One row of the diff's step table (step_time_ms, gpu_busy_pct, gpu_time_per_step_us, kernels_per_step,
    syncs_per_step, ...): before, after, change, change_pct or ratio."""
    if stat not in STATS:
        raise PerflabError(f"diff_metric stat {stat!r} must be one of {', '.join(STATS)}")
    d = recorded_diff(ev, before, after)
    row = next((m for m in d.metrics if m.name == metric), None)
    if row is None:
        raise PerflabError(f"the diff has no metric {metric!r} ({', '.join(m.name for m in d.metrics)})")
    value = row.to_dict()[stat]
    if value is None:
        raise PerflabError(f"{metric}: {stat} is undefined (before is 0)")
    return Computed(round(float(value), 4), {"metric": metric, "before": round(row.before, 4),
                                             "after": round(row.after, 4), "change %": row.change_pct,
                                             "verdict": d.verdict}, _source(before, after))


@analysis
def diff_finding(ev: Any, status: str = "appeared", before: str = "before", after: str = "slow") -> Computed:
    """The most severe finding with that status in the diff (appeared: in after only; disappeared: in
    before only), `healthy` left out."""
    if status not in STATUSES:
        raise PerflabError(f"diff_finding status {status!r} must be one of {', '.join(STATUSES)}")
    d = recorded_diff(ev, before, after)
    rank = {"info": 0, "low": 1, "medium": 2, "high": 3}
    rows = [f for f in d.findings if f.status == status and f.id != "healthy"]
    if not rows:
        raise PerflabError(f"no finding {status} between the recorded {before} and {after} traces")
    rows.sort(key=lambda f: (-rank.get(f.after_severity or f.before_severity or "info", 0),
                             -float(f.after_gain_pct if f.after_gain_pct is not None else f.before_gain_pct or 0.0)))
    evidence = {f.id: f"{f.status} ({f.before_severity or '-'} -> {f.after_severity or '-'})" for f in d.findings}
    return Computed(rows[0].id, evidence, _source(before, after))
