"""low-occupancy from the launch shape alone: blocks so small that an SM cannot be filled.

An SM holds at most maxBlocksPerSm blocks and maxWarpsPerSm warps. A kernel launched with blocks of
T threads fills ceil(T / warpSize) warps per block, so however much else is free the SM runs at most
min(maxBlocksPerSm x warps per block, maxWarpsPerSm) warps: below half of maxWarpsPerSm, too few warps
are resident to hide latency; and a block smaller than a warp leaves lanes of every warp idle. This needs
the device's limits, which an Nsight Systems export records (TARGET_INFO_GPU); the trace gives the block.
The gain assumes such a kernel could run at most twice as fast with full blocks (an assumption, named in
the evidence): Nsight Compute on it says how much the occupancy really costs.
"""
from __future__ import annotations

import numpy as np

from perflab.analysis.work.kernels import window_gpu_rows
from perflab.doctor.context import Context
from perflab.doctor.finding import Finding
from perflab.doctor.on_path import critical_saving
from perflab.doctor.registry import rule
from perflab.doctor.registry import significant as _finding
from perflab.trace.model import KERNEL

OCCUPANCY_LIMIT = 0.5   # resident warps the launch shape allows, as a share of the SM's
LANES_LIMIT = 0.75      # threads of a block's warps that have work
SPEEDUP_CAP = 2.0       # assumed: full blocks make such a kernel at most this much faster


def _limits(ctx: Context, rows: np.ndarray) -> dict | None:
    props = [p for p in ctx.trace.meta.get("device_properties") or [] if p.get("maxBlocksPerSm") and p.get("maxWarpsPerSm")]
    if not props or rows.size == 0:
        return None
    devices = ctx.trace.device[rows]
    main = int(np.bincount(devices[devices >= 0]).argmax()) if (devices >= 0).any() else props[0]["id"]
    return next((p for p in props if p["id"] == main), props[0])


@rule
def block_size_occupancy(ctx: Context) -> list[Finding]:
    t = ctx.trace
    rows = window_gpu_rows(t, ctx.windows)
    rows = rows[(t.kind[rows] == KERNEL) & (t.block[rows] > 0)]
    dev = _limits(ctx, rows)
    if dev is None:
        return []
    warp, max_blocks, max_warps = dev.get("warpSize") or 32, dev["maxBlocksPerSm"], dev["maxWarpsPerSm"]
    threads = t.block[rows]
    warps = -(-threads // warp)
    occupancy = np.minimum(max_blocks * warps, max_warps) / max_warps
    lanes = threads / (warps * warp)
    limited = (occupancy < OCCUPANCY_LIMIT) | (lanes < LANES_LIMIT)
    if not limited.any():
        return []
    sel, occ, lane = rows[limited], occupancy[limited], lanes[limited]
    dur = t.dur[sel]
    fill = occ * lane  # the share of the SM's thread slots the shape can fill
    saved, on_path = critical_saving(ctx, sel, float((dur * (1.0 - 1.0 / SPEEDUP_CAP)).sum()))
    gain = ctx.share(saved)
    per_name = np.bincount(t.name[sel], weights=dur)
    top = int(np.argmax(per_name))
    on_top = t.name[sel] == top
    shown = int(threads[limited][on_top][0])
    kernel_us = float(t.dur[rows].sum())
    return _finding(
        "low-occupancy", gain,
        f"{t.names[top][:80]} runs {int(on_top.sum())}x with {shown}-thread blocks: an SM holds at most {max_blocks} "
        f"blocks, so at most {float(occ[on_top][0]) * 100:.0f}% of its {max_warps} warp slots can be filled"
        + (f" and {100 - float(lane[on_top][0]) * 100:.0f}% of each warp's lanes are idle" if lane[on_top][0] < 1 else "")
        + f"; such kernels take {100 * float(dur.sum()) / kernel_us:.0f}% of GPU kernel time.",
        {"threads_per_block": shown, "warps_per_block": int(warps[limited][on_top][0]), "max_blocks_per_sm": max_blocks,
         "max_warps_per_sm": max_warps, "theoretical_occupancy_pct": 100.0 * float(occ[on_top][0]),
         "active_lanes_pct": 100.0 * float(lane[on_top][0]), "thread_slots_filled_pct": 100.0 * float(fill[on_top][0]),
         "kernel_time_pct": 100.0 * float(dur.sum()) / kernel_us, "step_time_pct": ctx.share(float(dur.sum())),
         "assumed_speedup_cap": SPEEDUP_CAP, "kernels": [t.names[i] for i in np.argsort(-per_name)[:5] if per_name[i] > 0], **on_path},
        f"Launch blocks of at least {max_warps // max_blocks * warp} threads (a multiple of {warp}) so the block limit "
        "no longer caps the resident warps: give each thread block more threads (and each thread less work if "
        "needed); then check with Nsight Compute (ncu --section Occupancy) that achieved occupancy rose.",
        [ctx.event(r) for r in sel[np.argsort(-dur)[:5]].tolist()],
    )
