"""Serving analyses (puzzles with tools = ["serving"]): answers from the recorded serving.json.

Per variant the summary that analysis/engines/serving.py computes from the engine's log (throughput, TTFT / TPOT /
latency percentiles, padded decode rows), and the analytic cost of the two schedules in forward passes.
Registered into questions.ANALYSES on import, like every analysis.
"""
from __future__ import annotations

from typing import Any

from perflab.errors import PerflabError
from perflab.puzzles.evidence.serving import FILE, Serving
from perflab.puzzles.questions.registry import Computed, analysis

SOURCE = f"the recorded serving runs ({FILE})"
SHOWN = ("requests_per_s", "tokens_per_s", "makespan_ms", "ttft_p50_ms", "ttft_p90_ms", "tpot_p50_ms",
         "latency_p50_ms", "padded_rows_pct", "mean_live_rows", "forwards")


def _summary(ev: Any, variant: str) -> dict[str, Any]:
    return Serving().replay(ev, variant)["summary"]


def _value(summary: dict[str, Any], field: str, variant: str) -> float:
    value = summary.get(field)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        numeric = sorted(k for k, v in summary.items() if isinstance(v, (int, float)) and not isinstance(v, bool))
        raise PerflabError(f"the {variant} serving summary has no number {field!r} (fields: {', '.join(numeric)})")
    return float(value)


def _evidence(ev: Any, variants: tuple[str, ...]) -> dict[str, Any]:
    out = {}
    for v in variants:
        s = _summary(ev, v)
        out[v] = ", ".join(f"{k} {s[k]:.4g}" for k in SHOWN if isinstance(s.get(k), (int, float)))
    return out


@analysis
def serving_metric(ev: Any, variant: str = "slow", field: str = "requests_per_s") -> Computed:
    """One number of a variant's serving summary (requests_per_s, ttft_p50_ms, padded_rows_pct, ...)."""
    value = _value(_summary(ev, variant), field, variant)
    return Computed(round(value, 4), _evidence(ev, (variant,)), SOURCE)


@analysis
def serving_ratio(ev: Any, field: str = "requests_per_s", numerator: str = "solution",
                  denominator: str = "slow") -> Computed:
    """numerator's field over denominator's (requests_per_s: the throughput speed-up of the fix)."""
    num = _value(_summary(ev, numerator), field, numerator)
    den = _value(_summary(ev, denominator), field, denominator)
    if den == 0:
        raise PerflabError(f"the {denominator} run's {field} is zero: no ratio")
    return Computed(round(num / den, 3), {**_evidence(ev, (numerator, denominator)),
                                          "ratio": f"{num:.4g} / {den:.4g}"}, SOURCE)


@analysis
def serving_analytic(ev: Any, field: str = "ratio") -> Computed:
    """The cost model from the output lengths alone (analysis.engines.serving.forward_counts): forward passes of the
    static and the continuous schedule, and their ratio."""
    doc = ev.require_json(FILE, "analytic", "serving log (serving.json)")
    a = doc["analytic"]
    value = a.get(field)
    if not isinstance(value, (int, float)):
        raise PerflabError(f"the serving cost model has no number {field!r} (fields: {', '.join(sorted(a))})")
    return Computed(round(float(value), 3), dict(a), f"the cost model in {FILE} (from the output lengths alone)")
