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
- A host-side cost the fix removes outright (a sync's wait, allocator calls): the step after it is no longer than the
  longer of the host's timeline without that time and the GPU's without the idle it left (`host_time_removed`).
- Work the fix runs beside other work (copies or collectives overlapped with compute): at most down to the compute
  lane, which overlap cannot shorten (`overlap_at_most`).
- Ops the fix brings to their roof: at most down to their work at the GPU's peak (`peak_sol_us`).
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
    from perflab.analysis.steps.links import launch_calls_us
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
    after = max(packed + float(t.dur[others].sum()), launch_calls_us(t, others)) / ctx.n_steps
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
    from perflab.analysis.steps.links import launch_calls_us
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
    launches = launch_calls_us(t, np.asarray([r for g in others for r in g.rows], dtype=np.int64)) / n
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


def host_time_removed(ctx: Any, gain_pct: float, host_us_per_step: float) -> dict[str, Any]:
    """A fix that removes host time outright (a blocking sync's wait, device allocator calls) and adds no work: the
    host's timeline loses `host_us_per_step`, the GPU's the idle it left (the gain), and the two run decoupled,
    so the step after it is no longer than the longer of the two: the floor (`speedup_at_least`), never above the
    gain's own speed-up."""
    step = step_us(ctx)
    after = max(step - host_us_per_step, step * (1.0 - gain_pct / 100.0))
    if step <= 0 or after <= 0 or gain_pct <= 0:
        return {}
    return {"speedup_at_least": _r(step / after)}


def compute_lane_us(ctx: Any) -> float:
    """The compute kernels' time per step, overlaps merged (analysis/idle/overlap.py)."""
    return float(ctx.overlap["compute_us"]) / ctx.n_steps


def overlap_at_most(ctx: Any, other_lane_us: float = 0.0) -> dict[str, Any]:
    """Work run beside the compute (copies, collectives), perfectly overlapped: the step is no shorter than the
    compute kernels (the overlap hides work behind them, it does not shorten them), than `other_lane_us` (per step:
    work of another engine that cannot go faster, a collective's transfer), nor than the host's launch calls.
    The ceiling (`speedup_at_most`) and the step it leaves (`step_ms_at_best`); nothing without compute."""
    step = step_us(ctx)
    cpu_launch = float(ctx.launches.get("cpu_launch_us") or 0.0) / ctx.n_steps
    best = max(compute_lane_us(ctx), other_lane_us, cpu_launch)
    if best <= 0 or step <= best:
        return {}
    return {"speedup_at_most": _r(step / best), "step_ms_at_best": round(best / 1e3, 3)}


def peak_roofs(c: Any) -> Any:
    """The ceilings at the fastest each roof can be: the datasheet's peak or the measured figure, whichever is higher
    (a measured roof is what a benchmark reached; a fix's kernel may reach further, never past the peak)."""
    from dataclasses import replace

    peak = getattr(c, "peak", None) or {}
    return replace(c, dram=max([v for v in (c.dram, peak.get("dram")) if v] or [0.0]) or None,
                   compute={p: max(v, peak.get(p, 0.0)) for p, v in c.compute.items()})


def peak_sol_us(g: Any, c: Any, n_steps: int) -> float | None:
    """One op group's work per step at the GPU's peak (`peak_roofs`): its bytes at the peak DRAM rate or its FLOPs at
    its path's peak, whichever is longer, never above its time now; None without a DRAM figure."""
    pc = peak_roofs(c)
    if not pc.dram:
        return None
    flops_roof = pc.flops_roof(g.path)[0] if g.path != "memory" else None
    sol = max(g.bytes / pc.dram, g.flops / flops_roof if flops_roof and g.flops else 0.0) * 1e6
    return min(sol, g.time_us) / max(n_steps, 1)


def ops_at_peak(ctx: Any, ops: list) -> dict[str, Any]:
    """The ceiling of a fix that brings ops ((op group, its time per step)) to their roof: each at its work at the
    GPU's peak (`peak_sol_us`: the datasheet's figure where it is above the measured one), `saved_at_most`."""
    c, n = ctx.ceilings, ctx.n_steps
    return saved_at_most(ctx, sum(max(0.0, t - (peak_sol_us(g, c, n) or t)) for g, t in ops))


def saved_at_most(ctx: Any, saved_us_per_step: float) -> dict[str, Any]:
    """The ceiling of a fix that takes at most `saved_us_per_step` off the GPU's work: the step is no shorter than the
    GPU's busy time less that, nor than the host's launch calls. The idle the GPU has today is left out (the host's
    gaps are other findings', and a profiled host runs slower than an unprofiled one), so the ceiling is the GPU's."""
    best = max(busy_us(ctx) - saved_us_per_step, float(ctx.launches.get("cpu_launch_us") or 0.0) / ctx.n_steps)
    step = step_us(ctx)
    if saved_us_per_step <= 0 or best <= 0 or step <= best:
        return {}
    return {"speedup_at_most": _r(step / best), "step_ms_at_best": round(best / 1e3, 3)}


def dequant_range(ctx: Any, groups: list, passes: list[int], mms: list[int], widths: dict, today_us: float,
                  gain_pct: float) -> dict[str, Any]:
    """Narrow weights widened in separate passes (`passes`: indices of op `groups`) before their matmuls (`mms`;
    `widths`: narrow bytes per weight element by the weight's element count); `today_us`: the passes' and the
    matmuls' time. The floor: the passes
    gone, each matmul no slower than today (it reads fewer bytes for the same FLOPs), never above the point (the
    gain); the ceiling: the passes gone and each matmul reading its weights at the narrow width at the GPU's peak
    (`peak_roofs`)."""
    from perflab.doctor.on_path import critical_saving

    rows = [r for i in passes for r in groups[i].rows]
    saved = critical_saving(ctx, rows, sum(groups[i].time_us for i in passes))[0] if rows else 0.0
    out: dict[str, Any] = {"speedup_at_least": _r(min(speedup_of_gain(ctx.share(saved)), speedup_of_gain(gain_pct)))}
    pc = peak_roofs(ctx.ceilings)
    dram, compute = pc.dram, pc.compute
    if not dram:
        return out
    best = 0.0
    for g, narrow in ((groups[i], widths[groups[i].weight_numel]) for i in mms):
        flops_roof = compute.get(g.path) or max(compute.values(), default=0.0)
        moved = g.calls * (g.call_bytes - g.weight_numel * (g.weight_itemsize - narrow))
        best += max(moved / dram, g.flops / flops_roof if flops_roof else 0.0) * 1e6
    return {**out, **saved_at_most(ctx, max(today_us - best, 0.0) / ctx.n_steps)}
