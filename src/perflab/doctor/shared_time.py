"""Findings that claim the same lost time share it: their gains never add up to more than the time there is.

Several system findings are views of one cost: the same host<->device copies are `memcpy`, `h2d-copy` or
`d2h-copy` by direction, `pageable-memcpy` by where the host buffer lives and `no-overlap` by what they could
hide behind; the idle gaps that a sync, a launch, host code or the data loader cause are parts of one idle time.
Within such a pool the findings keep their rank: the first keeps its gain, each next one keeps only what the
ones before it left of the pool's time (the largest single claim for overlapping views; the GPU's idle time for
the idle causes). A reduced finding says so in its evidence (`gain_before_sharing_pct`, `shares_time_with`).
"""
from __future__ import annotations

from typing import Any

COPY_VIEWS = frozenset({"pageable-memcpy", "h2d-copy", "d2h-copy", "memcpy", "no-overlap"})
IDLE_CAUSES = frozenset({"host-sync", "launch-overhead", "host-compute", "input-pipeline", "allocator-churn",
                         "gpu-idle"})


def _share(findings: list[Any], pool: frozenset[str], capacity: float | None) -> None:
    members = [f for f in findings if f.id in pool and f.gain_pct > 0]
    if len(members) < 2:
        return
    left = max(f.gain_pct for f in members) if capacity is None else capacity
    first = members[0].id
    for f in members:
        keep = max(0.0, min(f.gain_pct, left))
        if keep < f.gain_pct:
            f.evidence = {**f.evidence, "gain_before_sharing_pct": round(f.gain_pct, 1), "shares_time_with": first}
            f.gain_pct = round(keep, 1)
        left -= keep


def share_lost_time(findings: list[Any], idle_pct: float | None = None) -> list[Any]:
    """`findings` ranked most important first; gains reduced in place where they claim time another took."""
    _share(findings, COPY_VIEWS, None)
    _share(findings, IDLE_CAUSES, idle_pct)
    return findings


def pooled_sums(findings: list[Any]) -> dict[str, float]:
    """The sum of gains per pool (what the tests hold against the time there is)."""
    return {"copies": sum(f.gain_pct for f in findings if f.id in COPY_VIEWS),
            "idle": sum(f.gain_pct for f in findings if f.id in IDLE_CAUSES),
            "all": sum(f.gain_pct for f in findings)}
