"""Segment churn in a snapshot's allocator history: device memory the caching allocator gave back to the driver
and took again inside the recorded window.

The caching allocator calls the driver (cudaMalloc: `segment_alloc`, cudaFree: `segment_free`; with expandable
segments `segment_map` / `segment_unmap`) only when its cache cannot serve a request. Segments that are
allocated and kept are the cache growing to its peak: no churn. Segments freed and allocated again are: the cache
emptied (torch.cuda.empty_cache, or the allocator freeing its cache to retry an allocation that did not fit),
bypassed (PYTORCH_NO_CUDA_MEMORY_CACHING), or split across streams (a block cached for one stream serves no
other, so a loop whose allocations alternate streams keeps fresh memory per stream and, when memory is short,
frees one stream's cache to serve the other). Each cudaFree also waits for the whole device first.

What the history says: how many segments and bytes went each way, on which streams, at which frames. What each
driver call costs is read from the history itself: consecutive driver calls with nothing recorded between
them are as far apart as one call lasts. Pure: no torch.
"""
from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

from perflab.analysis.gpu_memory.memory import mb, site
from perflab.trace.snapshot import Snapshot

TAKE = ("segment_alloc", "segment_map")
GIVE = ("segment_free", "segment_unmap")


def segment_churn(snap: Snapshot, device: int = 0) -> dict[str, Any] | None:
    """Driver allocations and frees in the recorded history of `device`; None where it recorded none."""
    events = snap.traces[device] if device < len(snap.traces) else []
    idx = [i for i, e in enumerate(events) if e.action in TAKE + GIVE]
    if not idx:
        return None
    segs = [events[i] for i in idx]
    taken = [e for e in segs if e.action in TAKE]
    given = [e for e in segs if e.action in GIVE]
    taken_b, given_b = sum(e.size for e in taken), sum(e.size for e in given)
    # segments given back and taken again: the smaller of the two flows (growth alone gives back nothing)
    cycles = min(len(taken), len(given))
    times = [e.time_us for e in events if e.time_us is not None]
    window_ms = (max(times) - min(times)) / 1e3 if len(times) >= 2 else None
    per_call, basis = _call_cost_us(events, idx)
    streams = Counter(e.stream for e in segs)
    return {
        "segment_allocs": len(taken), "segment_frees": len(given), "allocated_mb": mb(taken_b), "freed_mb": mb(given_b),
        "cycled_segments": cycles, "cycled_mb": mb(min(taken_b, given_b)),
        "streams": len(streams), "per_stream": {str(s): n for s, n in streams.most_common()},
        "emptied": sum(1 for e in given if any(f.name == "empty_cache" for f in e.frames)),
        "sites": _sites(taken or given), "free_sites": _sites(given),
        "window_ms": round(window_ms, 3) if window_ms is not None else None,
        "driver_call_us_est": round(per_call, 1) if per_call is not None else None, "driver_call_basis": basis,
        "driver_ms_est": round(per_call * len(segs) / 1e3, 3) if per_call is not None else None,
    }


def _sites(events: list) -> list[dict[str, Any]]:
    """Where the driver calls came from (the innermost frame outside torch), by bytes."""
    sites = Counter()
    for e in events:
        sites[site(e.frames)] += e.size
    total = sum(sites.values()) or 1
    return [{"site": k, "mb": mb(v), "pct": round(100.0 * v / total, 1)} for k, v in sites.most_common(3)]


def _call_cost_us(events: list, idx: list[int]) -> tuple[float | None, str]:
    """One driver call's duration, from the history's clock: the median gap between two consecutive driver calls
    with nothing recorded between them; else the shortest gap before any driver call (which holds the call)."""
    back_to_back, before = [], []
    for i in idx:
        if i == 0 or events[i].time_us is None or events[i - 1].time_us is None:
            continue
        gap = events[i].time_us - events[i - 1].time_us
        if gap < 0:
            continue
        before.append(gap)
        if events[i - 1].action in TAKE + GIVE:
            back_to_back.append(gap)
    if back_to_back:
        return statistics.median(back_to_back), f"median gap between {len(back_to_back)} back-to-back driver calls"
    if before:
        return min(before), "shortest gap before a driver call (an upper bound on one call)"
    return None, "the history has no times"
