"""Memory analyses over a `Snapshot`: reserved vs allocated vs active, pools, fragmentation, peaks, sites.

Sizes are bytes unless a key ends in `_mb` (MiB). Every function returns plain Python (JSON-ready).
Reserved = the segments cudaMalloc'd by the caching allocator; allocated = blocks handed to tensors;
active = allocated plus blocks freed by the program but still in use by a stream; free = reserved -
allocated (cached, reusable only by allocations of the same pool and stream).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any

from perflab.trace.snapshot import DEFAULT_POOL, Block, Frame, Snapshot

MB = 1024.0 * 1024.0
TIMELINE_POINTS = 400
_INTERNAL = ("/torch/", "\\torch\\", "<frozen", "/contextlib.py", "/functools.py", "/threading.py",
             # perflab's own hooks around a profiled program's module, compiled and graph calls: the allocation is
             # the caller's
             "/perflab/toolkit/step_hooks.py", "\\perflab\\toolkit\\step_hooks.py",
             "/perflab/toolkit/compile_watch.py", "\\perflab\\toolkit\\compile_watch.py")


def mb(n: float) -> float:
    return round(n / MB, 3)


def pool_label(pool: tuple[int, int]) -> str:
    return "default" if pool == DEFAULT_POOL else f"private {pool[0]},{pool[1]}"


def site(frames: list[Frame]) -> str:
    """The innermost Python frame outside torch and the standard library: where the program allocated."""
    py = [f for f in frames if f.filename.endswith(".py")]
    for f in py:
        if not any(part in f.filename for part in _INTERNAL):
            return f.label()
    if py:
        return py[0].label()
    return frames[0].label() if frames else "(no stack recorded)"


def totals(snap: Snapshot, device: int | None = None) -> dict[str, Any]:
    segs = [s for s in snap.segments if device is None or s.device == device]
    reserved = sum(s.total_size for s in segs)
    allocated = sum(s.allocated for s in segs)
    active = sum(s.active for s in segs)
    requested = sum(s.requested for s in segs)
    free = [b.size for s in segs for b in s.blocks if not b.active]
    free_total = sum(free)
    largest_free = max(free, default=0)
    return {
        "segments": len(segs), "blocks": sum(len(s.blocks) for s in segs),
        "reserved_mb": mb(reserved), "allocated_mb": mb(allocated), "active_mb": mb(active),
        "requested_mb": mb(requested), "free_mb": mb(reserved - allocated),
        "reserved_over_allocated": round(reserved / allocated, 3) if allocated else None,
        "free_pct": round(100.0 * (reserved - allocated) / reserved, 2) if reserved else 0.0,
        # 0: all free memory in one block; -> 1: scattered over many small blocks.
        "fragmentation": round(1.0 - largest_free / free_total, 4) if free_total else 0.0,
        "largest_free_mb": mb(largest_free),
        "expandable_segments": sum(1 for s in segs if s.is_expandable),
    }


def pools(snap: Snapshot, device: int | None = None) -> list[dict[str, Any]]:
    """One row per memory pool (the default pool and each private pool: a CUDA graph capture's)."""
    by_pool: dict[tuple[int, int], list] = defaultdict(list)
    for s in snap.segments:
        if device is None or s.device == device:
            by_pool[s.pool].append(s)
    rows = []
    for pool, segs in sorted(by_pool.items()):
        reserved = sum(s.total_size for s in segs)
        allocated = sum(s.allocated for s in segs)
        rows.append({"pool": pool_label(pool), "pool_id": list(pool), "private": pool != DEFAULT_POOL,
                     "segments": len(segs), "reserved_mb": mb(reserved), "allocated_mb": mb(allocated),
                     "active_mb": mb(sum(s.active for s in segs)), "free_mb": mb(reserved - allocated),
                     "live_blocks": sum(1 for s in segs for b in s.blocks if b.allocated)})
    return rows


def private_pools(snap: Snapshot, device: int | None = None) -> dict[str, Any]:
    rows = [p for p in pools(snap, device) if p["private"]]
    sizes = [p["reserved_mb"] for p in rows]
    total = sum(sizes)
    return {"count": len(rows), "reserved_mb": round(total, 3),
            "mean_mb": round(total / len(rows), 3) if rows else 0.0, "max_mb": max(sizes, default=0.0),
            "min_mb": min(sizes, default=0.0), "allocated_mb": round(sum(p["allocated_mb"] for p in rows), 3),
            # sharing one pool across captures keeps roughly the largest one
            "shared_pool_saving_mb": round(total - max(sizes, default=0.0), 3)}


def _live_blocks(snap: Snapshot, device: int | None) -> list[tuple[Block, tuple[int, int]]]:
    return [(b, s.pool) for s in snap.segments if device is None or s.device == device
            for b in s.blocks if b.allocated]


def top_sites(snap: Snapshot, device: int | None = None, n: int = 10) -> list[dict[str, Any]]:
    """Where the live (allocated) memory was allocated: bytes per allocation site, largest first.

    Without recorded stacks in the blocks, the device trace's alloc events still name the sites."""
    live = _live_blocks(snap, device)
    stacks = _alloc_stacks(snap, device)
    by_site: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for b, _pool in live:
        frames = b.frames or stacks.get(b.address, [])
        entry = by_site[site(frames)]
        entry[0] += b.size
        entry[1] += 1
    total = sum(v[0] for v in by_site.values()) or 1
    rows = [{"site": k, "mb": mb(v[0]), "blocks": v[1], "pct": round(100.0 * v[0] / total, 2)}
            for k, v in by_site.items()]
    return sorted(rows, key=lambda r: -r["mb"])[:n]


def _alloc_stacks(snap: Snapshot, device: int | None) -> dict[int, list[Frame]]:
    out: dict[int, list[Frame]] = {}
    for dev, events in enumerate(snap.traces):
        if device is not None and dev != device:
            continue
        for e in events:
            if e.action == "alloc" and e.frames:
                out[e.addr] = e.frames
    return out


def duplicated_buffers(snap: Snapshot, device: int | None = None, min_copies: int = 3) -> list[dict[str, Any]]:
    """Live blocks of the same size allocated at the same site in `min_copies` or more pools: one copy of
    a buffer per pool (static inputs or outputs per CUDA graph capture, ...)."""
    stacks = _alloc_stacks(snap, device)
    groups: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    for b, pool in _live_blocks(snap, device):
        frames = b.frames or stacks.get(b.address, [])
        if not frames:
            continue
        groups[(site(frames), b.size)].append(pool)
    rows = []
    for (where, size), pools_ in groups.items():
        if len(set(pools_)) >= min_copies:  # one copy per pool; same-size weights of many layers are not copies
            rows.append({"site": where, "block_mb": mb(size), "copies": len(pools_),
                         "pools": len(set(pools_)), "total_mb": mb(size * len(pools_)),
                         "redundant_mb": mb(size * (len(pools_) - 1))})
    return sorted(rows, key=lambda r: -r["redundant_mb"])


def timeline(snap: Snapshot, device: int = 0, points: int = TIMELINE_POINTS) -> dict[str, Any]:
    """Allocated and reserved bytes after each trace event, and their peaks over the recorded history.

    The trace starts when history recording started, so the level before its first event is
    reconstructed from the final state: start = end - sum of the recorded changes."""
    events = snap.traces[device] if device < len(snap.traces) else []
    end = totals(snap, device)
    end_alloc, end_res = end["allocated_mb"] * MB, end["reserved_mb"] * MB
    d_alloc, d_res = [], []
    for e in events:
        a = r = 0
        if e.action == "alloc":
            a = e.size
        elif e.action == "free_completed":
            a = -e.size
        elif e.action in ("segment_alloc", "segment_map"):
            r = e.size
        elif e.action in ("segment_free", "segment_unmap"):
            r = -e.size
        d_alloc.append(a)
        d_res.append(r)
    alloc = end_alloc - sum(d_alloc)
    res = end_res - sum(d_res)
    start_alloc, start_res = alloc, res
    series_a, series_r = [], []
    peak_a, peak_r, peak_at = alloc, res, -1
    for i, (a, r) in enumerate(zip(d_alloc, d_res)):
        alloc += a
        res += r
        series_a.append(alloc)
        series_r.append(res)
        if alloc > peak_a:
            peak_a, peak_at = alloc, i
        peak_r = max(peak_r, res)
    stride = max(1, len(series_a) // points)
    idx = list(range(0, len(series_a), stride))
    if series_a and idx[-1] != len(series_a) - 1:
        idx.append(len(series_a) - 1)
    counts: dict[str, int] = defaultdict(int)
    for e in events:
        counts[e.action] += 1
    peak_site = site(events[peak_at].frames) if peak_at >= 0 and events[peak_at].frames else None
    return {"events": len(events), "actions": dict(counts),
            "start_allocated_mb": mb(start_alloc), "start_reserved_mb": mb(start_res),
            "peak_allocated_mb": mb(peak_a), "peak_reserved_mb": mb(peak_r), "peak_event": peak_at,
            "peak_site": peak_site,
            "series": {"event": idx, "allocated_mb": [mb(series_a[i]) for i in idx],
                       "reserved_mb": [mb(series_r[i]) for i in idx]}}
