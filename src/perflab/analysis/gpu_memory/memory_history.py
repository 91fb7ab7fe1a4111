"""What a snapshot's allocator history says about its reserved memory and its peak.

The caching allocator keeps the segments it reserved for the largest demand it has met: reserved memory is
the cache of a peak, not waste, as long as it matches that peak. So reserved memory is judged against the
peak of allocated memory over the recorded history (which starts from what was resident before it,
reconstructed from the final state), pool by pool: only the default pool's (CUDA graph pools are the
private-pool rule's), by block address. Without a history the only baseline is what is allocated at the
snapshot, and an earlier peak may explain the cache: the baseline says which one was used.

Release bursts: blocks allocated one after another and freed together at one moment, in one run of frees.
Their lifetimes ended together whatever their last use: one owner held them (an autograd graph, a list,
a cache). `memory_summary` gathers these with memory.py's views: what the memory doctor reads. Pure: no torch.
"""
from __future__ import annotations

import bisect
from collections import Counter
from pathlib import Path
from typing import Any

from perflab.analysis.gpu_memory.memory import (MB, duplicated_buffers, mb, pools, private_pools, site, timeline, top_sites,
                                     totals)
from perflab.analysis.gpu_memory.segment_churn import segment_churn
from perflab.trace.snapshot import Snapshot

_RESERVE = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}


def _private_ranges(snap: Snapshot, device: int):
    ranges = sorted((s.address, s.address + s.total_size) for s in snap.segments if s.device == device and s.private)
    starts = [r[0] for r in ranges]

    def private(addr: int) -> bool:
        i = bisect.bisect_right(starts, addr) - 1
        return i >= 0 and addr < ranges[i][1]
    return private


def default_pool_history(snap: Snapshot, device: int = 0) -> dict[str, Any]:
    """Allocated and reserved bytes of the default pool before, at the peak of, and after the recorded history."""
    segs = [s for s in snap.segments if s.device == device and not s.private]
    alloc_now = sum(s.allocated for s in segs)
    res_now = sum(s.total_size for s in segs)
    events = snap.traces[device] if device < len(snap.traces) else []
    private = _private_ranges(snap, device)
    d_alloc, d_res = [], []
    for e in events:
        a = r = 0
        if not private(e.addr):
            if e.action == "alloc":
                a = e.size
            elif e.action == "free_completed":
                a = -e.size
            r = _RESERVE.get(e.action, 0) * e.size
        d_alloc.append(a)
        d_res.append(r)
    alloc, res = alloc_now - sum(d_alloc), res_now - sum(d_res)
    start_alloc, start_res = alloc, res
    peak_alloc, peak_res = alloc, res
    for a, r in zip(d_alloc, d_res):
        alloc += a
        res += r
        peak_alloc, peak_res = max(peak_alloc, alloc), max(peak_res, res)
    return {"events": len(events), "allocated_mb": mb(alloc_now), "reserved_mb": mb(res_now),
            "start_allocated_mb": mb(start_alloc), "start_reserved_mb": mb(start_res),
            "peak_allocated_mb": mb(max(peak_alloc, alloc_now)), "peak_reserved_mb": mb(peak_res)}


def reserved_baseline(snap: Snapshot, device: int = 0) -> dict[str, Any]:
    """The allocation the default pool's reserved memory is judged against, and in words which one it is."""
    h = default_pool_history(snap, device)
    if not h["events"]:
        return {**h, "basis": "snapshot", "baseline_mb": h["allocated_mb"], "predates_history": False,
                "text": (f"the {h['allocated_mb']:,.0f} MB allocated at the snapshot (no allocator history was recorded: "
                         "an earlier peak may explain the cache; torch.cuda.memory._record_memory_history() before "
                         "the steps records it)")}
    base = h["peak_allocated_mb"]
    excess = h["reserved_mb"] - base
    # the cache beyond the peak was already reserved when recording began: a peak before it may explain it
    predates = excess > 0 and h["start_reserved_mb"] - base >= 0.5 * excess
    text = (f"the peak of {base:,.0f} MB allocated in the default pool over the recorded history ({h['events']:,} "
            f"events; {h['start_allocated_mb']:,.0f} MB resident before it)")
    if predates:
        text += (f"; {h['start_reserved_mb']:,.0f} MB were already reserved when the history began, so an earlier "
                 "peak may explain the cache: start recording the history before the first step")
    return {**h, "basis": "history", "baseline_mb": base, "predates_history": predates, "text": text}


def release_bursts(snap: Snapshot, device: int = 0, top: int = 3) -> list[dict[str, Any]]:
    """The largest runs of frees with no allocation between them, and the blocks they release."""
    events = snap.traces[device] if device < len(snap.traces) else []
    live: dict[int, tuple[int, int, list]] = {}   # addr -> (size, alloc event index, frames)
    bursts: list[dict] = []
    run: list[tuple[int, int, list]] = []
    allocated = 0

    def close(i: int) -> None:
        if run:
            bursts.append({"end_event": i, "blocks": list(run), "after": allocated})
            run.clear()

    for i, e in enumerate(events):
        if e.action == "alloc":
            close(i)
            live[e.addr] = (e.size, i, e.frames)
            allocated += e.size
        elif e.action == "free_completed":
            size, at, frames = live.pop(e.addr, (e.size, -1, e.frames))
            allocated -= size
            run.append((size, at, frames))
    close(len(events))
    out = []
    for b in sorted(bursts, key=lambda b: -sum(x[0] for x in b["blocks"]))[:top]:
        blocks = b["blocks"]
        sites = Counter()
        for size, _at, frames in blocks:
            sites[site(frames)] += size
        allocs = sorted(at for _s, at, _f in blocks if at >= 0)
        out.append({"mb": mb(sum(x[0] for x in blocks)), "blocks": len(blocks), "largest_block_mb": mb(max(x[0] for x in blocks)),
                    "allocated_at_events": len(set(allocs)), "first_alloc_event": allocs[0] if allocs else -1,
                    "freed_at_event": b["end_event"], "allocated_after_mb": mb(b["after"]),
                    "sites": [{"site": k, "mb": mb(v)} for k, v in sites.most_common(3)
                              if v >= 0.05 * sum(x[0] for x in blocks)]})
    return out


def held_together(snap: Snapshot, device: int = 0) -> dict[str, Any] | None:
    """The largest release burst, with what stays allocated after it (the resident memory) for scale."""
    bursts = release_bursts(snap, device, top=1)
    if not bursts:
        return None
    b = bursts[0]
    # the replay counts from zero: what stays allocated after the burst adds the level before the history
    resident = b["allocated_after_mb"] + _level_before_history_mb(snap, device)
    return {**b, "resident_after_mb": round(max(resident, 0.0), 3)}


def _level_before_history_mb(snap: Snapshot, device: int) -> float:
    events = snap.traces[device] if device < len(snap.traces) else []
    now = sum(s.allocated for s in snap.segments if s.device == device)
    delta = sum(e.size if e.action == "alloc" else -e.size if e.action == "free_completed" else 0 for e in events)
    return (now - delta) / MB


def memory_summary(snap: Snapshot) -> dict[str, Any]:
    """Everything the memory doctor and the puzzle questions read, per device."""
    devices = snap.devices() or [0]
    per_device = {}
    for d in devices:
        per_device[str(d)] = {"totals": totals(snap, d), "pools": pools(snap, d),
                              "private_pools": private_pools(snap, d), "top_sites": top_sites(snap, d),
                              "duplicated": duplicated_buffers(snap, d)[:10],
                              "timeline": timeline(snap, d), "baseline": reserved_baseline(snap, d),
                              "held_together": held_together(snap, d), "segment_churn": segment_churn(snap, d)}
    first = per_device[str(devices[0])]
    return {"path": str(Path(snap.meta.get("path", ""))) if snap.meta.get("path") else "",
            "devices": devices, "device": first, "per_device": per_device}
