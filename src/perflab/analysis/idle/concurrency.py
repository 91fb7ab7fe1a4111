"""Kernel concurrency: how many kernels run at once, per-stream busy time, and how much of the GPU
each kernel fills (thread blocks against SMs).

A kernel launched with fewer thread blocks than the GPU has SMs leaves the other SMs idle for as
long as it runs alone. Independent kernels like that (per-expert or per-head GEMMs issued one after
the other on one stream) could share the GPU: on several streams they run side by side, or batched
into one launch they fill it. `kernel_concurrency` measures both sides from a Kineto trace: the time
with two or more kernels running (a sweep over kernel start/end times) and the SM-time that
under-filled kernels leave idle while they run alone. Pure: numpy over the trace model, no torch.
"""
from __future__ import annotations

import numpy as np

from perflab.analysis.idle.intervals import Coverage
from perflab.analysis.work.kernels import TYPES, row_types, window_gpu_rows
from perflab.analysis.steps.windows import Windows
from perflab.trace.model import KERNEL, Trace, distinct

UNDERFILL = 0.5        # a kernel with at most this share of the SMs' worth of blocks leaves half the GPU idle
MIN_KERNEL_US = 10.0   # shorter kernels are launch-overhead territory: side streams cannot beat the launch rate
_NOT_COMPUTE = (TYPES.index("communication"), TYPES.index("memcpy"), TYPES.index("memset"))


def sm_count(trace: Trace) -> int | None:
    """numSms of the trace's (main) GPU from the deviceProperties Kineto writes; None when absent."""
    props = [p for p in trace.meta.get("device_properties") or [] if isinstance(p, dict)]
    rows = np.flatnonzero(trace.kind == KERNEL)
    devices = trace.device[rows]
    devices = devices[devices >= 0]
    main = int(np.bincount(devices).argmax()) if devices.size else 0
    for p in sorted(props, key=lambda p: p.get("id") != main):
        n = p.get("numSms")
        if isinstance(n, (int, float)) and not isinstance(n, bool) and n > 0:
            return int(n)
    return None


def levels(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The sweep: (segment start, segment end, kernels running) for consecutive event times.

    An interval ending where another starts does not overlap it (ends sort before starts)."""
    starts, ends = np.asarray(starts, dtype=np.float64), np.asarray(ends, dtype=np.float64)
    if starts.size == 0:
        z = np.zeros(0)
        return z, z, np.zeros(0, dtype=np.int64)
    times = np.concatenate((starts, ends))
    delta = np.concatenate((np.ones(starts.size, dtype=np.int64), -np.ones(ends.size, dtype=np.int64)))
    order = np.lexsort((delta, times))          # by time, ends (-1) first
    times, delta = times[order], delta[order]
    level = np.cumsum(delta)
    return times[:-1], times[1:], level[:-1]


def time_at_levels(starts: np.ndarray, ends: np.ndarray) -> dict[int, float]:
    """µs spent with exactly k intervals open, for every k >= 1 that occurs."""
    s, e, lv = levels(starts, ends)
    span = e - s
    keep = (lv > 0) & (span > 0)
    if not keep.any():
        return {}
    per_level = np.bincount(lv[keep], weights=span[keep])  # one pass, not a Python loop over millions of segments
    return {int(k): float(per_level[k]) for k in np.flatnonzero(per_level > 0).tolist()}


def kernel_concurrency(trace: Trace, windows: Windows) -> dict:
    """Concurrency, per-stream busy time and SM fill of the kernels launched inside the windows.

    Returns plain numbers: busy_us (>= 1 kernel running), concurrent_us (>= 2), concurrent_pct
    (of busy), max_concurrent, mean_concurrency (kernel time / busy time), level_us {k: µs},
    streams [{stream, kernels, busy_us, busy_pct}] busiest first (pct of the windows), sms,
    fill_pct (kernel-time-weighted mean of min(blocks / SMs, 1), in %), and `underfilled`: the
    kernels of at least MIN_KERNEL_US with at most UNDERFILL x SMs blocks (no copies or
    collectives): count, time_us, alone_us (time none of them shares with another kernel),
    idle_sm_us (alone time x the share of SMs they leave idle), grids and names (most time first).
    """
    rows = window_gpu_rows(trace, windows)
    rows = rows[trace.kind[rows] == KERNEL]
    rows = rows[np.argsort(trace.ts[rows], kind="stable")]
    starts, ends = trace.ts[rows], trace.end[rows]
    lv = time_at_levels(starts, ends)
    busy = float(sum(lv.values()))
    concurrent = float(sum(us for k, us in lv.items() if k >= 2))
    total = windows.total
    streams = []
    for sid in distinct(trace.stream[rows]).tolist():
        on = rows[trace.stream[rows] == sid]
        b = float(Coverage(trace.ts[on], trace.end[on]).total())
        streams.append({"stream": int(sid), "kernels": int(on.size), "busy_us": b,
                        "busy_pct": 100.0 * b / total if total else 0.0})
    streams.sort(key=lambda s: -s["busy_us"])
    sms = sm_count(trace)
    dur = trace.dur[rows]
    out = {
        "kernels": int(rows.size), "window_us": total, "busy_us": busy, "concurrent_us": concurrent,
        "concurrent_pct": 100.0 * concurrent / busy if busy else 0.0,
        "max_concurrent": max(lv) if lv else 0,
        "mean_concurrency": float(dur.sum()) / busy if busy else 0.0,
        "level_us": {str(k): v for k, v in lv.items()},
        "streams": streams, "sms": sms, "fill_pct": None,
        "underfilled": {"count": 0, "time_us": 0.0, "alone_us": 0.0, "idle_sm_us": 0.0, "grids": [], "names": []},
    }
    grid = trace.grid[rows]
    if not sms or rows.size == 0 or not (grid > 0).any():
        return out
    known = grid > 0
    fill = np.minimum(np.where(known, grid, sms) / sms, 1.0)
    out["fill_pct"] = 100.0 * float((fill * dur)[known].sum() / max(dur[known].sum(), 1e-12))
    types = row_types(trace, rows)
    under = known & (grid <= UNDERFILL * sms) & (dur >= MIN_KERNEL_US) & ~np.isin(types, _NOT_COMPUTE)
    if not under.any():
        return out
    # time each under-filled kernel runs with no other kernel beside it
    seg_s, seg_e, level = levels(starts, ends)
    shared = Coverage(seg_s[level >= 2], seg_e[level >= 2])
    u = np.flatnonzero(under)
    alone = np.maximum(dur[u] - shared.covered(starts[u], ends[u]), 0.0)
    by_name = np.bincount(trace.name[rows[u]], weights=dur[u])
    names = [trace.names[i] for i in np.argsort(-by_name) if by_name[i] > 0]
    out["underfilled"] = {
        "count": int(u.size), "time_us": float(dur[u].sum()), "alone_us": float(alone.sum()),
        "idle_sm_us": float((alone * (1.0 - fill[u])).sum()),
        "grids": sorted({int(g) for g in grid[u].tolist()}), "names": names[:5],
        "rows": rows[u][np.argsort(-alone)][:5].tolist(),
    }
    return out
