"""Not judged is not healthy: where most of the GPU's time is in kernels the op work model cannot price
(custom CUDA or Triton kernels, Inductor's fused kernels, kernels of ops recorded without shapes, CUDA-graph
replays), nothing says how close that time runs to its roof. A busy GPU is then not `healthy`: the finding
names the share, the kernels that hold it and the `perflab ncu` command that measures the first of them.

Its id is `not-judged` (a verdict, not a bottleneck: the trace cannot say whether those kernels run below their
roof; their capture, the model's config or Nsight Compute can), at `info`, with no gain: the gap is unknown until
the kernels are priced. It stands beside the system-level verdict: where a system finding leads, it follows it.
"""
from __future__ import annotations

import numpy as np

from perflab.doctor.context import Context
from perflab.doctor.finding import Finding
from perflab.trace.model import KERNEL

UNJUDGED_SHARE = 0.5     # priced work under this share of the GPU time: the dominant time is not judged
TOP_KERNELS = 5


def model_priced(ctx: Context) -> dict | None:
    """The iterations' roof from the model (`--model`), where it prices at least half of the iterations' time:
    then the time is judged, whatever kernels ran it."""
    roof = (ctx.serving or {}).get("roof") if ctx.iterations is not None else None
    return roof if roof and roof.get("pct_of_roof") is not None and roof["priced_time_pct"] >= 100 * UNJUDGED_SHARE \
        else None


def unpriced_kernels(ctx: Context) -> list[dict]:
    """Kernels in the windows that the work model left unpriced, by GPU time (largest first), with the rows."""
    from perflab.analysis.work.kernels import window_gpu_rows

    trace = ctx.trace
    rows = window_gpu_rows(trace, ctx.windows)
    rows = rows[trace.kind[rows] == KERNEL]
    priced = np.asarray(ctx.op_work.kernel_rows, dtype=np.int64)
    rows = rows[~np.isin(rows, priced)]
    if not rows.size:
        return []
    ids, inverse = np.unique(trace.name[rows], return_inverse=True)
    us = np.bincount(inverse, weights=trace.dur[rows])
    # each name's rows in one pass (a mask per name is names x rows on a trace with thousands of kernels)
    groups = np.split(rows[np.argsort(inverse, kind="stable")], np.cumsum(np.bincount(inverse))[:-1])
    out = [{"name": trace.names[int(i)], "us": float(t), "rows": g} for i, t, g in zip(ids.tolist(), us.tolist(), groups)]
    return sorted(out, key=lambda r: -r["us"])


def unjudged(ctx: Context) -> Finding | None:
    """A `not-judged` verdict when the priced work is under half the GPU time; None when the time was judged."""
    from perflab.doctor.rules.roof import kernel_ncu_command, ready, replay_why, unjudged_why

    work = ctx.op_work
    total = work.kernel_us
    if total <= 0 or model_priced(ctx):
        return None
    priced = work.modelled_us if ready(ctx) else 0.0
    if priced >= UNJUDGED_SHARE * total:
        return None
    kernels = unpriced_kernels(ctx)
    if not kernels:
        return None
    unpriced = sum(k["us"] for k in kernels)
    share = 100 * unpriced / total
    top = kernels[0]
    try:
        cmd = kernel_ncu_command(ctx, np.asarray(top["rows"], dtype=np.int64))
    except (ValueError, IndexError):   # no launch ncu could be pointed at: the note still stands
        cmd = None
    n = ctx.n_steps
    listed = [{"kernel": k["name"][:160], "gpu_time_pct": round(100 * k["us"] / total, 1),
               "us_per_step": round(k["us"] / n, 2), "launches_per_step": round(k["rows"].size / n, 2)}
              for k in kernels[:TOP_KERNELS]]
    names = ", ".join(f"{k['kernel'][:60]} ({k['gpu_time_pct']:.0f} %)" for k in listed[:3])
    replays = replay_why(ctx, unpriced)
    why = unjudged_why(ctx) if not ready(ctx) else replays or "the work model has no formula for their ops or kernels"
    summary = (f"Not judged: {share:.0f}% of the GPU time is in kernels the work model cannot price ({names}), "
               f"so how close it runs to its roof is unknown; the GPU is busy {ctx.gpu_busy_pct:.0f}% of step time. "
               + (f"Most of it is {replays}. Or profile" if replays else "Profile")
               + f" the top kernel with Nsight Compute: {cmd or 'perflab ncu on it'}.")
    return Finding(
        id="not-judged", severity="info", gain_pct=0.0, summary=summary,
        evidence={"unjudged_gpu_time_pct": round(share, 1), "priced_gpu_time_pct": round(100 * priced / total, 1),
                  "gpu_busy_pct": round(ctx.gpu_busy_pct, 2), "why": why, "kernels": listed, "ncu_command": cmd,
                  "speed_of_light": "not judged"},
        fix=(f"Measure the unpriced kernels with Nsight Compute, the largest first: {cmd} (then `perflab doctor` on the "
             "report; `perflab investigate` does both)." if cmd else
             "Measure the unpriced kernels with Nsight Compute (perflab ncu), the largest first."),
        events=[ctx.event(int(k["rows"][0])) for k in kernels[:TOP_KERNELS]])
