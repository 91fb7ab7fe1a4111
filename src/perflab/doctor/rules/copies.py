"""Copy rules: host<->device copies that cost the step (pageable-memcpy, no-overlap, h2d-copy, d2h-copy, memcpy).

Copy time that overlapping could hide belongs to no-overlap (only copies with no data dependency on the
compute beside them: analysis/idle/copy_deps.py); h2d-copy / d2h-copy keep what would remain. pageable-memcpy comes
before no-overlap and h2d-copy before memcpy, so equal gains keep that order (rank is a stable sort).
Registered from rules/system.py, between the host rules and gpu-idle.
"""
from __future__ import annotations

from perflab.doctor.context import Context
from perflab.doctor.finding import EventRef, Finding
from perflab.doctor.fix_bounds import copy_removed, overlap_at_most
from perflab.doctor.registry import LOW, rule
from perflab.doctor.registry import significant as _finding
from perflab.doctor.rules.cuda_fixes import fix as fix_for
from perflab.doctor.rules.evidence import idle_evidence as _idle_evidence

_OVERLAP_POOR_PCT = 20.0

def _hideable_copy_us(ctx: Context, key: str = "independent_us") -> float:
    """Copy time that overlapping with compute could hide: copies run serialized, and compute with no data
    dependency on them exists beside them (analysis.idle.copy_deps)."""
    hideable = sum(ctx.copies[d][key] for d in ("h2d", "d2h"))
    if hideable <= 0 or ctx.overlap["copy"]["overlap_pct"] >= _OVERLAP_POOR_PCT:
        return 0.0
    return min(hideable, ctx.overlap["compute_us"])


def _copy_cost(ctx: Context, direction: str) -> float:
    """What copying costs. Copies that are already asynchronous but serialized with compute are an
    overlap problem (no-overlap claims the part it could hide); a blocking copy is first a copy problem."""
    async_exposed = {d: ctx.copies[d]["async_exposed_us"] for d in ("h2d", "d2h")}
    total = sum(async_exposed.values())
    hidden = _hideable_copy_us(ctx, "async_independent_us") * async_exposed[direction] / total if total > 0 else 0.0
    return ctx.copies[direction]["exposed_us"] - hidden + ctx.gaps.copy_idle.get(direction, 0.0)


def _copy_evidence(ctx: Context, direction: str) -> dict:
    c = ctx.copies[direction]
    return {"copies_per_step": c["count"] / ctx.n_steps, "mb_per_step": c["bytes"] / ctx.n_steps / 1e6,
            "copy_time_pct": ctx.share(c["total_us"]), "not_overlapped_pct": ctx.share(c["exposed_us"]),
            "gbps": c["gbps"], "pageable": c["pageable_count"]}


def _copy_events(ctx: Context, directions: tuple[str, ...], pageable_only: bool = False) -> list[EventRef]:
    from perflab.analysis.idle.memcpy import copy_rows, direction, is_pageable

    rows = copy_rows(ctx.trace, ctx.windows)
    picked = [r for r in rows.tolist() if direction(ctx.trace.name_of(r)) in directions
              and (not pageable_only or is_pageable(ctx.trace.name_of(r)))]
    picked.sort(key=lambda r: -ctx.trace.dur[r])
    return [ctx.event(r) for r in picked[:5]]


@rule
def pageable_memcpy(ctx: Context) -> list[Finding]:
    """Range: the floor has the GPU idle while the host staged the copies gone (a pinned copy needs no staging and
    its DMA is no slower than the staged one); the ceiling, the copies hidden behind the compute
    (fix_bounds.overlap_at_most). A pinned copy still moves its bytes over the host link, but the datasheets hold
    no host link rate to price that lane, so the ceiling leaves it out (looser, never broken)."""
    pageable = [d for d in ("h2d", "d2h", "d2d", "other") if ctx.copies.get(d, {}).get("pageable_count")]
    if not pageable:
        return []
    exposed = sum(ctx.copies[d]["pageable_exposed_us"] for d in pageable)
    gain = ctx.share(exposed + ctx.gaps.copy_idle.get("pageable", 0.0))
    count = sum(ctx.copies[d]["pageable_count"] for d in pageable)
    mb = sum(ctx.copies[d]["pageable_bytes"] for d in pageable) / 1e6
    seconds = sum(ctx.copies[d]["pageable_us"] for d in pageable) / 1e6
    return _finding(
        "pageable-memcpy", gain,
        f"{count / ctx.n_steps:.0f} copies per step go through pageable host memory "
        f"({mb / ctx.n_steps:.1f} MB/step at {mb / 1e3 / seconds if seconds else 0:.1f} GB/s): they are staged, "
        f"synchronous and serialize with compute, ~{gain:.0f}% of step time.",
        {**_idle_evidence(ctx), "pageable_copies_per_step": count / ctx.n_steps,
         "pageable_mb_per_step": mb / ctx.n_steps, "pageable_gbps": mb / 1e3 / seconds if seconds else 0.0,
         "pageable_time_pct": ctx.share(seconds * 1e6), "copy_idle_pct": ctx.share(ctx.gaps.copy_idle.get("pageable", 0.0)),
         "directions": pageable, **_staging_floor(ctx), **overlap_at_most(ctx)},
        fix_for(ctx, "pageable-memcpy",
            "Allocate host buffers in pinned memory (tensor.pin_memory(), DataLoader(pin_memory=True)) once and "
            "reuse them, then copy with .to(device, non_blocking=True) so copies run asynchronously and overlap "
            "with compute."),
        _copy_events(ctx, tuple(pageable), pageable_only=True),
    )


def _staging_floor(ctx: Context) -> dict:
    from perflab.analysis.work.estimate import speedup_of_gain

    return {"speedup_at_least": round(speedup_of_gain(ctx.share(ctx.gaps.copy_idle.get("pageable", 0.0))), 2)}


@rule
def no_overlap(ctx: Context) -> list[Finding]:
    """Range: the floor is the copy time proven hideable (copies beside compute that neither feeds nor uses them),
    hidden; the ceiling, every copy hidden behind the compute (fix_bounds.overlap_at_most: the compute lane is what
    remains; the copies' own lane is left out, their rate could rise to the host link's peak, which the datasheets
    do not hold)."""
    copy = ctx.overlap["copy"]
    host_copies = sum(ctx.copies[d]["total_us"] for d in ("h2d", "d2h"))
    if host_copies <= 0 or copy["overlap_pct"] >= _OVERLAP_POOR_PCT or ctx.overlap["compute_us"] <= 0:
        return []
    exposed = sum(ctx.copies[d]["exposed_us"] for d in ("h2d", "d2h"))
    gain = ctx.share(_hideable_copy_us(ctx))   # no more than the compute beside them
    free = ctx.share(sum(ctx.copies[d]["independent_us"] for d in ("h2d", "d2h")))
    unknown = ctx.share(sum(ctx.copies[d]["unknown_us"] for d in ("h2d", "d2h")))
    dependent = max(0.0, ctx.share(exposed) - free - unknown)
    unknown = min(unknown, max(0.0, ctx.share(ctx.overlap["compute_us"]) - gain))
    same_stream = set(copy["streams"]) <= set(ctx.overlap["compute_streams"])
    sought, found = ctx.copies["h2d"]["consumers_sought"], ctx.copies["h2d"]["consumers_found"]  # one count for all
    evidence = {"copy_overlap_pct": copy["overlap_pct"], "exposed_copy_pct": ctx.share(exposed),
                "independent_copy_pct": free, "hideable_copy_pct": gain, "dependent_copy_pct": dependent, "undecided_copy_pct": unknown,
                "copy_streams": copy["streams"], "compute_streams": ctx.overlap["compute_streams"],
                "copy_consumers_found": f"{found} of {sought}" if sought else "no copy shapes recorded"}
    summary = (f"Copies run serialized with compute ({copy['overlap_pct']:.0f}% overlapped"
               f"{', on the compute stream' if same_stream else ''}); ")
    if gain > 0:
        summary += (f"~{free:.0f}% of step time is copies beside compute that neither feeds them nor uses them "
                    f"(launched without waiting on them): overlapping them could save ~{gain:.0f}%")
    if unknown >= 1.0 and unknown >= 0.25 * gain:
        summary += ("; " if gain > 0 else "") + (
            f"~{unknown:.0f}% more could be hidden only if those copies' data does not come from (or go to) the "
            "compute the host waited on around them, which the trace cannot tell (a next batch's input can move; "
            "a decode token read back and sent in cannot)")
        if gain < LOW:   # nothing (or little) proven: reported at the lowest claim, with its upper bound
            evidence["up_to_pct"] = gain + unknown
            gain = min(LOW, gain + unknown)
    if dependent >= 1.0:
        summary += f"; ~{dependent:.0f}% is copies that feed the kernel after them or read back the one before: no overlap hides that"
    if gain <= 0:
        return []   # nothing proven hideable: the copy rules (h2d-copy / d2h-copy) keep that time
    from perflab.analysis.work.estimate import speedup_of_gain

    evidence.update({"speedup_at_least": round(speedup_of_gain(ctx.share(_hideable_copy_us(ctx))), 2),
                     **overlap_at_most(ctx)})
    return _finding(
        "no-overlap", gain, summary + ".", evidence,
        fix_for(ctx, "no-overlap",
            "Issue the copies for step N+1 on a separate CUDA stream from pinned memory while step N computes "
            "(non_blocking=True, torch.cuda.Stream, wait_stream/record_stream), e.g. a prefetching loader."),
        _copy_events(ctx, ("h2d", "d2h")),
    )


def _copy_gone(ctx: Context, d: str, gain: float) -> dict:
    """What the step becomes when the fix removes these copies (perflab.doctor.fix_bounds)."""
    copy_us = ctx.copies[d]["total_us"] / ctx.n_steps
    return copy_removed(ctx, gain, copy_us)


@rule
def directed_copies(ctx: Context) -> list[Finding]:
    """h2d-copy / d2h-copy when one direction dominates the copy cost, else the generic memcpy."""
    costs = {d: _copy_cost(ctx, d) for d in ("h2d", "d2h")}
    total = sum(costs.values())
    out: list[Finding] = []
    for d, fid, what, fix in (
        ("h2d", "h2d-copy", "host-to-device copies",
         "Copy less and earlier: keep inputs/weights resident on the GPU, send compact dtypes (uint8 images, "
         "int32 ids) and convert on the GPU, prefetch the next batch on a side stream from pinned memory."),
        ("d2h", "d2h-copy", "device-to-host copies",
         "Bring back only what the host needs (argmax/top-k on the GPU, not full logits), in a compact dtype, "
         "and not every step; use non_blocking copies into pinned memory."),
    ):
        if total <= 0 or costs[d] < 0.6 * total:
            continue
        gain = ctx.share(costs[d])
        out += _finding(fid, gain, f"{what.capitalize()} dominate the copy time and cost ~{gain:.0f}% of step time "
                        f"({_copy_evidence(ctx, d)['mb_per_step']:.1f} MB per step).",
                        {**_idle_evidence(ctx), **_copy_evidence(ctx, d), **_copy_gone(ctx, d, gain)}, fix,
                        _copy_events(ctx, (d,)))
    if not out and total > 0:
        gain = ctx.share(total)
        out += _finding("memcpy", gain, f"Host<->device copies cost ~{gain:.0f}% of step time.",
                        {**_idle_evidence(ctx), "h2d_pct": ctx.share(costs["h2d"]), "d2h_pct": ctx.share(costs["d2h"])},
                        "Copy less (keep data on the GPU, compact dtypes), from pinned memory, asynchronously "
                        "and overlapped with compute.", _copy_events(ctx, ("h2d", "d2h")))
    return out
