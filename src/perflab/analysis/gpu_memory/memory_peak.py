"""What is alive at the memory peak: the allocator history of a snapshot replayed up to its peak.

`analysis.gpu_memory.memory.timeline` finds when allocated memory peaks; this asks who holds it then. The
device trace's alloc / free_completed events are replayed in order, keeping each live block's size
and allocation stack; at the event where allocated bytes peak, the live blocks are grouped by the
Python function that allocated them (the innermost frame outside torch and the standard library,
file.py:function, lines merged) and by block. Memory allocated before the history began (its
stack unknown) counts as "(before the recorded history)". Pure: no torch.
"""
from __future__ import annotations

import os
from collections import defaultdict
from typing import Any

from perflab.analysis.gpu_memory.memory import MB, mb, site, timeline
from perflab.trace.snapshot import Snapshot

EARLIER = "(before the recorded history)"
TOP = 8


def function_of(frames: list) -> str:
    """file.py:function of the allocation site (analysis.gpu_memory.memory.site without the line number)."""
    label = site(frames)
    if ":" not in label or " " not in label:
        return label
    file_line, _, name = label.partition(" ")
    return f"{os.path.basename(file_line.rsplit(':', 1)[0])}:{name}"


def live_at_peak(snap: Snapshot, device: int = 0, top: int = TOP) -> dict[str, Any]:
    events = snap.traces[device] if device < len(snap.traces) else []
    tl = timeline(snap, device)
    start = tl["start_allocated_mb"] * MB
    live: dict[int, tuple[int, list]] = {}
    allocated = peak = start
    peak_live: dict[int, tuple[int, list]] = {}
    peak_at = -1
    for i, e in enumerate(events):
        if e.action == "alloc":
            live[e.addr] = (e.size, e.frames)
            allocated += e.size
        elif e.action == "free_completed":
            size = live.pop(e.addr, (e.size, []))[0]
            allocated -= size
        else:
            continue
        if allocated > peak:
            peak, peak_at, peak_live = allocated, i, dict(live)
    by_fn: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    blocks = []
    for addr, (size, frames) in peak_live.items():
        fn = function_of(frames)
        by_fn[fn][0] += size
        by_fn[fn][1] += 1
        blocks.append({"address": addr, "mb": mb(size), "function": fn, "site": site(frames)})
    earlier = peak - sum(v[0] for v in by_fn.values())
    if earlier > 0:
        by_fn[EARLIER][0] += int(earlier)
    total = peak or 1.0
    rows = sorted(({"function": k, "mb": mb(v[0]), "blocks": v[1], "pct": round(100.0 * v[0] / total, 2)}
                   for k, v in by_fn.items()), key=lambda r: -r["mb"])
    blocks.sort(key=lambda b: -b["mb"])
    return {"peak_allocated_mb": mb(peak), "peak_event": peak_at, "events": len(events),
            "start_allocated_mb": mb(start), "by_function": rows[:top], "largest_blocks": blocks[:top],
            "live_blocks": len(peak_live)}
