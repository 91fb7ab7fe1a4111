"""What a finding's fix can give, where its gain alone cannot say it: the bounds on the step's speed-up that
follow from the fix the finding recommends (evidence keys of perflab.analysis.work.estimate).

- A wait the fix removes (launch gaps, host compute between launches): the step cannot get shorter than the
  work that remains on the GPU, nor than the host's own launch calls (`speedup_at_most`); removing the wait
  alone gives the gain (`speedup_at_least` where the fix also shrinks the kernels: graphs, fusion).
- A copy the fix removes: at least the copy's time back; at most down to the GPU's kernel time.
- One small kernel launched once per work item (launch-overhead's persistent-kernel fix): the point estimate
  (`speedup_est`) is the step with that kernel's work packed onto every SM (`per_item_packed`).
- A loop that runs the same ops on each piece of one tensor (launch-overhead's batching fix): the point estimate is
  the step with the looped ops run once over all items at their roof (`per_item_batched`).
Kernel findings (Nsight Compute) state their range and point themselves, from the one model of a kernel's time
(analysis/ncu/kernel_time.py: `kernel_speedup_est`, `kernel_speedup_at_least` / `_at_most`).
Each helper returns evidence entries to merge into the finding's evidence; nothing when a bound is unknown.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from perflab.analysis.work.estimate import speedup_of_gain
from perflab.doctor.registry import severity_for


def _r(x: float) -> float:
    return round(float(x), 2)


def gpu_floor_us(ctx: Any) -> float:
    """Per step, what the fix of a host-side wait leaves: the GPU's busy time, or the host's launch calls,
    whichever is longer (both must still happen)."""
    cpu_launch = float(ctx.launches.get("cpu_launch_us") or 0.0) / ctx.n_steps
    return max(busy_us(ctx), cpu_launch)


def step_us(ctx: Any) -> float:
    return ctx.window_us / ctx.n_steps


def busy_us(ctx: Any) -> float:
    """The GPU's busy time per step (kernels and copies)."""
    return ctx.gaps.busy_us / ctx.n_steps


def wait_removed(ctx: Any, gain_pct: float, *, shrinks_work: bool = False, floor_us: float | None = None,
                 gaps_us: float | None = None) -> dict[str, Any]:
    """A finding whose fix removes a wait: the step it leaves at best (`step_ms_at_best`), the speed-up that
    bounds (`speedup_at_most`), and, where the fix also shrinks the GPU's work (CUDA graphs, fusion), the wait's
    own gain as a floor (`speedup_at_least`). `gaps_us` (per step): the whole idle gaps the cause ends, a sync's
    share of them included (analysis/idle/gap_model.py `whole_gap`): with the host's work gone, a drain before
    it no longer leaves the GPU idle either, so the point (`speedup_est`) is the step without those gaps, paced
    by the GPU's work or the host's launch calls where they are longer, never under the wait's own gain."""
    step = step_us(ctx)
    floor = gpu_floor_us(ctx) if floor_us is None else floor_us
    out: dict[str, Any] = {}
    if shrinks_work:
        out["speedup_at_least"] = _r(speedup_of_gain(gain_pct))
    elif floor > 0 and step > floor:
        out["speedup_at_most"] = _r(max(step / floor, speedup_of_gain(gain_pct)))
        out["step_ms_at_best"] = round(floor / 1e3, 3)
        if gaps_us:
            after = max(step - gaps_us, floor)
            out["speedup_est"] = _r(min(max(step / after, speedup_of_gain(gain_pct)), out["speedup_at_most"]))
    return out


PER_ITEM_SHARE = 0.5   # one kernel name holds more than this share of the step's launches: a loop over work items


def per_item_packed(ctx: Any, gain_pct: float) -> dict[str, Any]:
    """One kernel name launched once per work item, each grid smaller than the SM count (a loop of small launches):
    a persistent kernel (a grid of a few blocks per SM looping over the items) runs the same per-item work with
    every SM busy, so each launch costs its duration times the share of the SMs its blocks fill (blocks / SMs, at
    most 1), and the launch gaps between items go. The other kernels keep their time and their host launch calls.
    The point (`speedup_est`) is the step over that, never under the wait's own gain (the floor); nothing where
    the loop is not there or the trace holds no grid or SM count."""
    from perflab.analysis.idle.concurrency import sm_count
    from perflab.analysis.steps.links import launch_of
    from perflab.trace.model import KERNEL

    t = ctx.trace
    rows = ctx.window_gpu
    rows = rows[t.kind[rows] == KERNEL]
    sms = sm_count(t)
    if not rows.size or not sms:
        return {}
    names, counts = np.unique(t.name[rows], return_counts=True)
    top = int(names[counts.argmax()])
    mine = t.name[rows] == top
    grid = t.grid[rows[mine]]
    if counts.max() <= PER_ITEM_SHARE * rows.size or (grid <= 0).any() or np.median(grid) >= sms:
        return {}
    packed = float((t.dur[rows[mine]] * np.minimum(1.0, grid / sms)).sum())
    others = rows[~mine]
    links = launch_of(t)[others]
    host = float(t.dur[np.unique(links[links >= 0])].sum())
    after = max(packed + float(t.dur[others].sum()), host) / ctx.n_steps
    step = step_us(ctx)
    if after <= 0 or step <= after:
        return {}
    return {"speedup_est": _r(max(step / after, speedup_of_gain(gain_pct))),
            "per_item_kernel": t.names[top], "per_item_launches_per_step": round(float(counts.max()) / ctx.n_steps, 1),
            "per_item_blocks_p50": float(np.median(grid)), "sm_count": int(sms),
            "step_us_packed": round(after, 1)}


def per_item_batched(ctx: Any, gain_pct: float) -> dict[str, Any]:
    """A loop over the pieces of one tensor (analysis/work/item_loops.py), batched: its ops run once per step over
    all items near their roof (a matmul's weight read once), the other ops keep their GPU time, the host launches
    the others' kernels. The point (`speedup_est`) is the step over that, never under the wait's own gain; the
    ceiling (`speedup_at_most`) has every op at its roof. Nothing where the trace shows no such loop, or the
    ceilings or the shapes to price it are missing."""
    from perflab.analysis.steps.links import launch_of
    from perflab.analysis.work.item_loops import batched_us, item_loop
    from perflab.analysis.work.speed_of_light import AT_ROOF_PCT, op_sol
    from perflab.trace.model import HOST_KINDS

    if severity_for(gain_pct) is None:
        return {}
    t, work, c, n = ctx.trace, ctx.op_work, ctx.ceilings, ctx.n_steps
    host = np.flatnonzero(np.isin(t.kind, HOST_KINDS))
    host = host[ctx.windows.contains(t.ts[host])]
    loop = item_loop(t, host, work, n)
    if loop is None:
        return {}
    looped = set(loop.looped)
    batched = [batched_us(work.groups[i], c, n) for i in loop.looped]
    if any(b is None for b in batched):
        return {}
    others = [g for i, g in enumerate(work.groups) if i not in looped]
    kept = sum(g.time_us for g in others) / n + work.unmodelled_us / n
    at_roof = sum((op_sol(g, c).get("sol_us") or g.time_us) for g in others) / n + work.unmodelled_us / n
    rows = np.asarray([r for g in others for r in g.rows], dtype=np.int64)
    links = launch_of(t)[rows] if rows.size else rows
    launches = float(t.dur[np.unique(links[links >= 0])].sum()) / n if rows.size else 0.0
    # the point: the batched ops as fast as an op the doctor counts as at its speed of light (AT_ROOF_PCT of the
    # roof); the ceiling: every op at its roof
    after = max(sum(batched) * 100.0 / AT_ROOF_PCT + kept, launches)
    best = max(sum(batched) + at_roof, launches)
    step = step_us(ctx)
    if after <= 0 or step <= after:
        return {}
    point = max(step / after, speedup_of_gain(gain_pct))
    return {"speedup_est": _r(point), "speedup_at_most": _r(max(step / best, point)),
            **loop.to_dict(work), "looped_us_per_step": round(sum(work.groups[i].time_us for i in looped) / n, 1),
            "looped_us_at_roof_batched": round(sum(batched), 1), "step_us_batched": round(after, 1)}


def copy_removed(ctx: Any, gain_pct: float, copy_us_per_step: float) -> dict[str, Any]:
    """A copy the fix removes (a smaller result, on the device): at least its gain back; at most the step shrinks to
    the GPU's kernel time (the copy gone, the host no longer waiting on it)."""
    step = step_us(ctx)
    kernels = busy_us(ctx) - copy_us_per_step
    out = {"speedup_at_least": _r(speedup_of_gain(gain_pct))}
    if kernels > 0 and step > kernels:
        out["speedup_at_most"] = _r(max(step / kernels, out["speedup_at_least"]))
        out["step_ms_at_best"] = round(kernels / 1e3, 3)
    return out


def packing_at_most(gain_pct: float) -> dict[str, Any]:
    """Idle SMs filled by independent work: perfect packing is the most it can give."""
    return {"speedup_at_most": _r(speedup_of_gain(gain_pct))} if gain_pct > 0 else {}


def fused_one_pass(chain: Any, groups: list[Any]) -> float:
    """The bytes one fused kernel over a chain moves: its first op's inputs read once and its last op's result
    written once (one fused pass over the bytes; without tensor identities a full-size operand that joins the
    chain later cannot be told from an intermediate). A written-out attention's fused bytes are one pass already."""
    if chain.attention:
        return chain.fused_bytes
    first, last = groups[chain.calls[0]], groups[chain.calls[-1]]
    return min(chain.fused_bytes, max(first.call_bytes - first.call_out_bytes, 0.0) + last.call_out_bytes)
