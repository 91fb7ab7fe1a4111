"""The evidence of the idle-gap analysis (analysis.idle.gaps): copy idle time by direction, the biggest gaps of
each cause as events a person can find in the timeline, and the host ops that held the GPU idle."""
from __future__ import annotations

import numpy as np

from perflab.analysis.idle.host import ops_holding_gaps
from perflab.analysis.idle.memcpy import direction, is_pageable
from perflab.analysis.idle.syncs import origin_op
from perflab.analysis.steps.windows import trace_origin
from perflab.trace.model import Trace, distinct


def copy_idle_by_direction(trace: Trace, parts: list[tuple[np.ndarray, np.ndarray]]) -> dict:
    """Copy-caused idle time by the direction (and pinned/pageable) of the copy involved."""
    out: dict[str, float] = {"h2d": 0.0, "d2h": 0.0, "d2d": 0.0, "other": 0.0, "pageable": 0.0}
    for amount, row in parts:
        for g in np.flatnonzero(amount > 0).tolist():
            r = int(row[g])
            name = trace.name_of(r) if r >= 0 else ""
            out[direction(name) if r >= 0 else "other"] += float(amount[g])
            if r >= 0 and is_pageable(name):
                out["pageable"] += float(amount[g])
    return out


def examples(trace: Trace, gaps: dict, causes: tuple[str, ...], per_cause: int = 5) -> dict[str, list[dict]]:
    """The biggest gaps of each cause, as events a person can find in the timeline."""
    origin = trace_origin(trace)
    out: dict[str, list[dict]] = {}
    gs, ge, inside, cause = gaps["gs"], gaps["ge"], gaps["inside"], gaps["cause"]
    draining = np.flatnonzero(gaps["draining"])
    if draining.size:
        top = draining[np.argsort(-gaps["sync_part"][draining], kind="stable")][:per_cause]
        rows = gaps["sync_row"][top]
        origins = origin_op(trace, rows)
        out["sync"] = [{"name": f"{trace.name_of(r)}" + (f" (in {o})" if o else ""),
                        "ts_us": float(trace.ts[r] - origin), "dur_us": float(trace.dur[r]),
                        "gpu_idle_after_us": float(inside[g])}
                       for g, r, o in zip(top.tolist(), rows.tolist(), origins)]
    for k, name in enumerate(causes):
        if name == "sync":
            continue
        idx = np.flatnonzero((cause == k) & (gaps["rest"] > 0))
        if idx.size == 0:
            continue
        top = idx[np.argsort(-inside[idx], kind="stable")][:per_cause]
        events = []
        for g in top.tolist():
            nxt = int(gaps["nxt"][g])
            label = f"GPU idle before {trace.name_of(nxt)}" if nxt >= 0 else "GPU idle until the step ends"
            events.append({"name": label[:200], "ts_us": float(gs[g] - origin), "dur_us": float(ge[g] - gs[g])})
        out[name] = events
    host_gaps = np.flatnonzero(cause == causes.index("host"))
    found = []
    for tid in distinct(gaps["tid"][host_gaps]).tolist():
        on = host_gaps[gaps["tid"][host_gaps] == tid]
        found += ops_holding_gaps(trace, tid, gs[on], ge[on])
    found.sort(key=lambda x: -x[1])
    if found:
        out["host_ops"] = [{"name": trace.name_of(r), "ts_us": float(trace.ts[r] - origin),
                            "dur_us": float(trace.dur[r]), "overlap_us": amount} for r, amount in found[:per_cause]]
    return out
