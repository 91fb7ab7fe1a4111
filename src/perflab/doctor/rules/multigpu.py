"""Multi-GPU rules: communication that compute does not hide, and ranks that wait for a slow rank.

Both read analysis.multigpu.collectives over every rank the doctor loaded. A fast rank's NCCL kernel starts
when that rank arrives and runs until the slowest rank has arrived too, so its exposed communication
holds two different costs: the transfer (comm-not-overlapped: hide it behind compute) and the wait
for the late rank (load-imbalance: give the late rank less work, or remove its stall). The wait is
taken out of the first and given to the second.
"""
from __future__ import annotations

import numpy as np

from perflab.doctor.context import Context
from perflab.doctor.finding import EventRef, Finding
from perflab.doctor.registry import rule
from perflab.doctor.registry import significant as _finding

_IMBALANCE_SPREAD_PCT = 5.0


def multirank(ctx: Context) -> dict:
    """analysis.multigpu.collectives.multirank_summary over the context's ranks (computed once per context)."""
    from perflab.analysis.multigpu.collectives import comm_rows, multirank_summary

    key = "multirank:" + ",".join(str(id(t)) for t in ctx.ranks) + f":{ctx.windows.key}"

    def compute() -> dict:
        if not any(comm_rows(t).size for t in ctx.ranks) and len(ctx.ranks) < 2:
            return {}
        step = ctx.windows.steps[0] if ctx.windows.kind == "step" else None
        return multirank_summary(ctx.ranks, step)
    return ctx.trace.cached(key, compute)


def _mine(summary: dict, rank: int) -> dict:
    return next((r for r in summary.get("per_rank", []) if r["rank"] == rank), {})


def _comm_events(ctx: Context, by: str = "dur_us") -> list[EventRef]:
    from perflab.analysis.multigpu.collectives import collective_table, window_mask

    table = collective_table(ctx.trace)
    idx = np.flatnonzero(window_mask(table, ctx.windows))
    key = np.nan_to_num(getattr(table, by)[idx], nan=0.0)
    return [ctx.event(int(table.row[i])) for i in idx[np.argsort(-key, kind="stable")[:5]].tolist()]


@rule
def comm_not_overlapped(ctx: Context) -> list[Finding]:
    """The ceiling: the transfer hidden behind the compute, the step no shorter than the compute kernels nor than
    the collectives' own transfer (fix_bounds.overlap_at_most). No floor: NCCL's kernels run on SMs and read memory,
    so compute beside them slows by an amount a trace that ran them apart cannot show; hiding the transfer need not
    give all of it back."""
    from perflab.analysis.work.estimate import gain_of_speedup
    from perflab.doctor.fix_bounds import overlap_at_most

    summary = multirank(ctx)
    mine = _mine(summary, ctx.trace.rank)
    comm = ctx.overlap["comm"]
    if comm["time_us"] <= 0 or not mine:
        return []
    exposed_us = mine["exposed_transfer_ms"] * 1e3 * ctx.n_steps
    exposed = ctx.share(exposed_us)
    kinds = summary["collectives"]["by_kind"]
    top = max(kinds, key=lambda k: kinds[k]["time_us"]) if kinds else "collective"
    bw = kinds.get(top, {}).get("busbw_gbps")
    waited = mine["exposed_wait_ms"] or 0.0
    bounds = overlap_at_most(ctx, max(comm["time_us"] / ctx.n_steps - waited * 1e3, 0.0))
    # hidden behind the compute, the transfer still takes its own time: the step cannot get shorter than it
    gain = min(exposed, gain_of_speedup(bounds["speedup_at_most"])) if "speedup_at_most" in bounds else exposed
    capped = (f"; hidden behind the compute it gives back at most ~{gain:.0f}%: the step cannot be shorter than "
              f"its {bounds['step_ms_at_best']:.2f} ms of transfer and compute lanes" if gain < exposed - 0.5 else "")
    return _finding(
        "comm-not-overlapped", gain,
        f"Collective communication is exposed ({comm['overlap_pct']:.0f}% overlapped with compute): "
        f"{mine['exposed_transfer_ms']:.2f} ms per step of {top} transfer runs while no compute does, "
        f"~{exposed:.0f}% of step time" + (f" (another {waited:.2f} ms/step is waiting for a slower rank: "
                                           "load-imbalance)" if waited > 0.05 else "") + capped + ".",
        {"comm_time_pct": ctx.share(comm["time_us"]), "comm_overlap_pct": comm["overlap_pct"],
         "exposed_comm_pct": ctx.share(comm["exposed_us"]), "exposed_transfer_pct": exposed,
         "exposed_comm_ms_per_step": mine["exposed_comm_ms"], "exposed_wait_ms_per_step": waited,
         "collectives_per_step": mine["collectives_per_step"], "dominant_collective": top,
         "busbw_gbps": bw, "comm_streams": comm["streams"],
         "per_rank_exposed_comm_ms": {r["rank"]: round(r["exposed_comm_ms"], 4) for r in summary["per_rank"]},
         **bounds},
        "Overlap communication with compute: launch the collective as soon as its input is ready "
        "(async_op=True / a side stream, then wait just before the result is used), bucket gradients so "
        "all-reduce of layer k runs during backward of layer k-1 (DDP/FSDP do this), and compute "
        "independent work meanwhile; fewer, larger collectives cost less latency.",
        _comm_events(ctx),
    )


@rule
def load_imbalance(ctx: Context) -> list[Finding]:
    summary = multirank(ctx)
    if len(summary.get("per_rank", [])) < 2:
        return []
    waits = {r: w for r, w in summary["wait_ms_per_step"].items() if w is not None}
    per_rank = {r["rank"]: r for r in summary["per_rank"]}
    exposed = {r: p["exposed_wait_ms"] for r, p in per_rank.items() if p.get("exposed_wait_ms") is not None}
    # the cost to the job: the share of its step the most-waiting rank spends waiting for the late one
    # with nothing else to do (a wait hidden behind that rank's own compute costs nothing)
    shares = {r: 100.0 * w / per_rank[r]["window_ms"] * max(per_rank[r]["steps"], 1)
              for r, w in exposed.items() if per_rank[r]["window_ms"] > 0}
    spread = summary["step_ms_spread_pct"]
    if not shares:
        return []
    waiter = max(shares, key=shares.get)
    gain = shares[waiter]
    if gain < 3.0 and spread < _IMBALANCE_SPREAD_PCT:
        return []
    late = summary["straggler"]
    outside = {r: round(p["step_ms"] - p["comm_ms"], 4) for r, p in per_rank.items()}
    # evening the time outside collectives out across ranks (the late rank's extra work spread, not removed)
    # saves at least its excess over the mean, never more than the wait; removing it saves up to the wait
    step_ms = per_rank[late]["step_ms"]
    excess = min(max(outside.values()) - sum(outside.values()) / len(outside), exposed[waiter])
    at_least = step_ms / (step_ms - excess) if step_ms > excess > 0 else None
    return _finding(
        "load-imbalance", gain,
        f"Rank {late} arrives last at the collectives; rank {waiter} waits for it "
        f"{waits[waiter]:.2f} ms per step inside NCCL kernels, {exposed[waiter]:.2f} ms of it with no compute "
        f"running (~{gain:.0f}% of its step time)"
        + (f"; spreading rank {late}'s extra work evenly alone saves {excess:.2f} ms per step (at least "
           f"{at_least:.2f}x), removing it saves up to the wait." if at_least else "."),
        {"straggler_rank": late, "waiting_rank": waiter, "wait_ms_per_step": waits,
         "exposed_wait_ms_per_step": exposed,
         "wait_pct": {r: round(v, 2) for r, v in shares.items()},
         "step_ms_per_rank": {r: round(p["step_ms"], 4) for r, p in per_rank.items()},
         "step_ms_spread_pct": spread, "time_outside_collectives_ms": outside,
         "last_to_arrive_counts": summary["last_to_arrive_counts"],
         **({"speedup_at_least": round(at_least, 3), "balanced_saving_ms_per_step": round(excess, 4)}
            if at_least else {})},
        f"Find what rank {late} does that the others do not (more data, a bigger shard, extra host work "
        "such as logging, checkpointing, data loading or a host sync on that rank only, a slower device) "
        "and balance it: even shards, move rank-specific host work off the step, or overlap it.",
        _comm_events(ctx, "wait_us"),
    )
