"""A kernel-level gain on a trace where several streams run at once: what the fix saves on the step's critical
path (analysis/idle/critical_path.py), not the kernels' share of the step.

A kernel off the path is hidden behind the chain that sets the step: making it faster saves nothing. A kernel on
the path saves at most the stretch the path spends in it, less the part of that stretch where another stream's
work (not itself part of the finding: kernels of the finding on parallel streams shrink with it) runs beside it,
which would set the step once the kernel is gone: the exposed part. The fix's saving is spread over the finding's
kernels by their time, and each keeps at most its exposed part. Where no two streams overlap, every kernel is on
the GPU's chain and the gain is left as it is.
"""
from __future__ import annotations

import numpy as np

from perflab.analysis.idle.intervals import intersect, merge

MIN_OVERLAP_SHARE = 0.01   # streams overlapping less than this share of the GPU's busy time run one after another


def concurrent(trace, rows: np.ndarray) -> bool:
    """GPU work of these rows runs on at least two streams at the same time."""
    if rows.size == 0 or np.unique(trace.stream[rows]).size < 2:
        return False
    summed = 0.0
    for s in np.unique(trace.stream[rows]).tolist():
        on = rows[trace.stream[rows] == s]
        a, b = merge(trace.ts[on], trace.end[on])
        summed += float((b - a).sum())
    a, b = merge(trace.ts[rows], trace.end[rows])
    busy = float((b - a).sum())
    return busy > 0 and summed - busy > MIN_OVERLAP_SHARE * busy


def _overlap(span: tuple[float, float], others: tuple[np.ndarray, np.ndarray]) -> float:
    s, e = intersect((np.array([span[0]]), np.array([span[1]])), others)
    return float((e - s).sum())


def exposed_us(ctx, rows) -> dict[int, float]:
    """Per row of the finding: the time the critical path spends in it and no other stream's work (outside the
    finding) runs beside it."""
    trace = ctx.trace
    mine = np.asarray(sorted({int(r) for r in rows}), dtype=np.int64)
    others = np.setdiff1d(ctx.window_gpu, mine)
    cp = ctx.critical_path
    out: dict[int, float] = {}
    beside: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for r in mine.tolist():
        span = cp.on_path.get(r)
        if span is None:
            out[r] = 0.0
            continue
        s = int(trace.stream[r])
        if s not in beside:
            o = others[trace.stream[others] != s]
            beside[s] = merge(trace.ts[o], trace.end[o])
        out[r] = max(0.0, span[1] - span[0] - _overlap(span, beside[s]))
    return out


def critical_saving(ctx, rows, saving_us: float) -> tuple[float, dict]:
    """The part of `saving_us` (what the fix takes off these GPU rows' time, in total over the window) that the
    step's critical path gives back, and the evidence that says so ({} where streams do not overlap)."""
    rows = np.unique(np.asarray(list(rows), dtype=np.int64))
    if saving_us <= 0 or rows.size == 0 or not ctx.streams_overlap:
        return saving_us, {}
    exposed = exposed_us(ctx, rows)
    dur = ctx.trace.dur
    total = float(dur[rows].sum())
    if total <= 0:
        return saving_us, {}
    kept = sum(min(saving_us * float(dur[r]) / total, exposed[int(r)]) for r in rows.tolist())
    evidence = {"on_critical_path_pct": round(100.0 * sum(exposed.values()) / total, 1),
                "gain_before_critical_path_pct": round(ctx.share(saving_us), 1),
                "critical_path_set_by": ctx.critical_path.setter()}
    return kept, evidence
