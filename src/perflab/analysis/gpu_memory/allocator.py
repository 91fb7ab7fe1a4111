"""Device allocator calls: cudaMalloc/cudaFree and their kin, where the caching allocator is bypassed.

PyTorch's caching allocator calls the driver only when its cache cannot serve a request (first use,
a new size that fits no cached block, after `torch.cuda.empty_cache()`, when memory runs short and it
frees cached blocks to retry). Each call is slow on the host (a cudaMalloc takes 0.1-10 ms) and
cudaFree first waits for the whole device to finish, draining the GPU's queue. Inside the steps these
calls are churn. They are recognized from the runtime and driver call names alone (CUDA runtime and
driver, ROCm, the virtual-memory API that expandable segments use, pinned host memory), so Nsight
Systems data mapped into the same model reads the same (its names carry a `_vNNNN` suffix). Pure.
"""
from __future__ import annotations

import re
from collections import Counter

import numpy as np

from perflab.analysis.idle.intervals import Coverage
from perflab.analysis.steps.windows import Windows, per_windows
from perflab.trace.model import CPU_OP, RUNTIME, Trace, distinct

_ALLOCATOR = re.compile(
    r"^(cuda|hip)(Malloc|Free)(Async|Host|Managed|Pitch|3D|Array|FromPoolAsync|AsyncFromPool)?(_v\d+|_ptsz)*$|"
    r"^(cuda|hip)(HostAlloc|HostMalloc|HostFree|ExtMallocWithFlags|MallocFromPoolAsync)(_v\d+|_ptsz)*$|"
    r"^cuMem(Alloc|Free|AllocAsync|FreeAsync|AllocHost|FreeHost|AllocManaged|AllocPitch|HostAlloc|Create|Release|"
    r"Map|Unmap|AddressReserve|AddressFree|AllocFromPoolAsync)(_v\d+|_ptsz)*$")
FREE = re.compile(r"Free|Release|Unmap")


def is_allocator_call(name: str) -> bool:
    return _ALLOCATOR.match(name.strip()) is not None


def allocator_rows(trace: Trace) -> np.ndarray:
    """Runtime/driver rows of device (and pinned host) memory allocation and release, by start time."""
    def compute() -> np.ndarray:
        rows = np.flatnonzero((trace.kind == RUNTIME) & trace.name_table_mask(is_allocator_call))
        return rows[np.argsort(trace.ts[rows], kind="stable")]
    return trace.cached("allocator_rows", compute)


def allocator_time(trace: Trace, tid: int) -> Coverage:
    """Time thread `tid` spends inside allocator calls."""
    cache = trace.cached("allocator_time", dict)
    if tid not in cache:
        rows = allocator_rows(trace)
        rows = rows[trace.tid[rows] == tid]
        cache[tid] = Coverage(trace.ts[rows], trace.end[rows])
    return cache[tid]


def drained_by_free(trace: Trace, gs: np.ndarray, tids: np.ndarray, next_launch: np.ndarray,
                    tolerance_us: float = 2.0) -> np.ndarray:
    """Per gap: did the GPU run out of work while its launching thread (`tids`) was inside a free (cudaFree, cuMemFree,
    hipFree, cuMemUnmap/Release), with the next work (`next_launch`: when it was launched) only after it returned?

    Such a free waits for the device to finish before it releases the memory: it drains the queue as a
    synchronization does. When it returns the host has no lead left, and the GPU idles until the host has
    dispatched and launched again: that restart is the price of the free.
    """
    out = np.zeros(gs.size, dtype=bool)
    rows = allocator_rows(trace)
    rows = rows[[FREE.search(trace.name_of(r)) is not None for r in rows.tolist()]] if rows.size else rows
    if rows.size == 0 or gs.size == 0:
        return out
    for tid in distinct(tids).tolist():
        mine = rows[trace.tid[rows] == tid]
        if mine.size == 0:
            continue
        on = np.flatnonzero(tids == tid)
        j = np.searchsorted(trace.ts[mine], gs[on] + tolerance_us, side="right") - 1
        end = trace.end[mine[np.maximum(j, 0)]]
        out[on] = (j >= 0) & (end >= gs[on] - tolerance_us) & (next_launch[on] >= end - tolerance_us)
    return out


def _allocator_calls(trace: Trace, windows: Windows) -> dict:
    rows = allocator_rows(trace)
    rows = rows[windows.contains(trace.ts[rows])]
    names = Counter(trace.name_of(r) for r in rows.tolist())
    frees = sum(c for n, c in names.items() if FREE.search(n))
    host_us = float(trace.dur[rows].sum())
    longest = rows[np.argsort(-trace.dur[rows], kind="stable")][:8]
    return {"count": int(rows.size), "frees": int(frees), "allocs": int(rows.size - frees),
            "names": dict(names.most_common()), "host_us": host_us,
            "host_pct": 100.0 * host_us / windows.total if windows.total else 0.0,
            "longest_rows": [int(r) for r in longest], "inside_first_call": _inside_first_calls(trace, rows)}


def _inside_first_calls(trace: Trace, rows: np.ndarray) -> dict:
    """Allocator time inside the first call of the host op that holds the most of it: {op, us, pct}. A warm-up
    (the first call of an op loading kernels, autotuning, filling the cache) allocates once, not every step."""
    ops = np.flatnonzero((trace.kind == CPU_OP) & (trace.dur > 0))
    if rows.size == 0 or ops.size == 0:
        return {}
    ops = ops[np.lexsort((-trace.dur[ops], trace.ts[ops]))]
    owner = np.full(rows.size, -1, dtype=np.int64)
    for i, r in enumerate(rows.tolist()):  # the outermost op of the same thread around the call
        inside = ops[(trace.tid[ops] == trace.tid[r]) & (trace.ts[ops] <= trace.ts[r]) & (trace.end[ops] >= trace.end[r])]
        owner[i] = inside[0] if inside.size else -1
    held = owner >= 0
    if not held.any():
        return {}
    per_name = Counter()
    for o, d in zip(owner[held].tolist(), trace.dur[rows][held].tolist()):
        per_name[int(trace.name[o])] += d
    name = per_name.most_common(1)[0][0]
    calls = ops[trace.name[ops] == name]
    first = calls[np.argmin(trace.ts[calls])]
    in_first = float(trace.dur[rows][owner == first].sum())
    total = float(trace.dur[rows].sum())
    return {"op": trace.names[name], "us": in_first, "pct": 100.0 * in_first / total if total else 0.0}


def allocator_calls(trace: Trace, windows: Windows) -> dict:
    """Allocator calls made inside the windows: count, frees vs allocations, names, host time."""
    return per_windows(trace, "allocator_calls", windows, _allocator_calls)
