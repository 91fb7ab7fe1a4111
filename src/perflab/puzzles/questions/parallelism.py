"""Analyses for the parallelism puzzles (catalog 74-78): pipeline idle time per stage, message counts.

The numbers come from analysis.multigpu.collectives.multirank_summary over every rank of a recording (the same
per-rank rows as the doctor's `analyses.multigpu`, through questions.multirank's cache).
"""
from __future__ import annotations

from typing import Any

from perflab.errors import PerflabError
from perflab.puzzles.questions.multirank import multirank
from perflab.puzzles.questions.registry import Computed, analysis


def idle_pct(row: dict[str, Any]) -> float | None:
    """Share of the step (%) with no compute kernel on that rank's GPU (idle, or inside NCCL only)."""
    step = row.get("step_ms") or 0.0
    if step <= 0:
        return None
    return max(0.0, 100.0 * (1.0 - row["compute_ms"] / step))


@analysis
def rank_idle_pct(ev: Any, variant: str = "slow", rank: int | None = None) -> Computed:
    """% of the step a rank's GPU runs no compute kernel: of `rank`, or the largest over ranks (None).

    On a pipeline of p stages and m micro-batches this is the bubble, (p-1)/(m+p-1) of the step when the
    stages are even and the transfers hidden."""
    s = multirank(ev, variant)
    values = {r["rank"]: idle_pct(r) for r in s["per_rank"]}
    values = {r: v for r, v in values.items() if v is not None}
    if not values:
        raise PerflabError(f"no rank of the recorded {variant} traces has a step time")
    if rank is None:
        rank = max(values, key=values.get)
    if rank not in values:
        raise PerflabError(f"no rank {rank} in the recording (ranks: {', '.join(map(str, sorted(values)))})")
    row = next(r for r in s["per_rank"] if r["rank"] == rank)
    return Computed(values[rank], {"rank": rank, "idle %": round(values[rank], 2),
                                   "step ms": round(row["step_ms"], 4), "compute ms": round(row["compute_ms"], 4),
                                   "every rank (idle %)": {r: round(v, 2) for r, v in values.items()}},
                    f"the recorded per-rank traces of {variant}: 1 - compute / step per rank")


@analysis
def rank_metric_min(ev: Any, field: str, variant: str = "slow") -> Computed:
    """A per-rank number (questions.multirank.RANK_FIELDS) of the rank where it is smallest (e.g. the
    least-overlapped rank's comm_overlap_pct)."""
    from perflab.puzzles.questions.multirank import rank_metric

    s = multirank(ev, variant)
    values = {r["rank"]: r.get(field) for r in s["per_rank"] if r.get(field) is not None}
    if not values:
        return rank_metric(ev, field, variant)   # its one-line error: unknown field, or no rank has it
    return rank_metric(ev, field, variant, rank=min(values, key=values.get))
