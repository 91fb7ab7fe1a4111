"""Batch-size sweep analyses (catalog/13-batch-size-knee): answers from artifacts/sweep.json.

The sweep is recorded on the GPU machine by scripts/record.py batch-sweep (perflab.toolkit.batch_sweep).
Registered into questions.ANALYSES on import, like every analysis.
"""
from __future__ import annotations

from typing import Any

from perflab.errors import PerflabError
from perflab.puzzles.questions.registry import Computed, analysis
from perflab.toolkit import batch_sweep

FIELDS = ("batch", "latency_ms", "forward_ms", "throughput")
SOURCE = "the recorded batch-size sweep (sweep.json)"


def _sweep(ev: Any) -> dict[str, Any]:
    return ev.require_json("sweep.json", "points", "batch-size sweep",
                           ev._record_hint())


def _field(field: str) -> str:
    if field not in FIELDS:
        raise PerflabError(f"sweep field {field!r} must be one of {', '.join(FIELDS)}")
    return field


@analysis
def sweep_knee(ev: Any, field: str = "batch") -> Computed:
    """A field of the knee point: the smallest batch reaching knee_fraction of the best throughput."""
    data = _sweep(ev)
    frac = float(data.get("knee_fraction", batch_sweep.KNEE_FRACTION))
    k = batch_sweep.knee(data["points"], frac)
    best = max(data["points"], key=lambda p: p["throughput"])
    return Computed(k[_field(field)], {"knee batch": k["batch"], "knee throughput /s": round(k["throughput"]),
                                       "knee latency ms": round(k["latency_ms"], 4),
                                       "best throughput /s": round(best["throughput"]),
                                       "best at batch": best["batch"], "knee rule": f"first batch >= {frac:.0%} of best"},
                    SOURCE)


@analysis
def sweep_point(ev: Any, batch: int = 1, field: str = "latency_ms") -> Computed:
    """A field of the sweep at one batch size."""
    p = batch_sweep.point(_sweep(ev)["points"], int(batch))
    return Computed(p[_field(field)], {k: round(v, 4) if isinstance(v, float) else v for k, v in p.items()}, SOURCE)
