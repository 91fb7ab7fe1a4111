"""Blocking waits: host time in which a thread sleeps until something else happens.

A thread inside `select.poll`, `epoll`, `multiprocessing.connection.wait`, a `queue.get`, a condition or
lock wait, a future's `result()`, `time.sleep`, a ZeroMQ poll or a futex is not computing: it waits for
another thread, another process, the network or a timer. A process whose threads sit there (a serving
front-end waiting for requests and for its engine's answers) is not what holds a GPU back, and the
time is not host compute to vectorize. Device synchronization that a host thread waits in
(`cudaEventSynchronize` in a scheduler loop) is a wait of the same kind for that thread.

Waits are recognized by name in the Python frames (with_stack), in operators and in runtime calls; the
outermost wait of a thread covers what it calls. Pure: no torch.
"""
from __future__ import annotations

from collections import Counter

import numpy as np

from perflab.analysis.idle.intervals import Coverage, intersect, merge
from perflab.analysis.idle.syncs import is_sync_call
from perflab.analysis.idle.wait_names import is_wait
from perflab.analysis.steps.windows import Windows
from perflab.trace.model import CPU_OP, PYTHON, RUNTIME, USER_ANNOTATION, Trace, distinct

def wait_rows(trace: Trace) -> np.ndarray:
    """Rows of blocking waits: Python frames, operators or annotations named like one, and device syncs."""
    def compute() -> np.ndarray:
        host = np.isin(trace.kind, (PYTHON, CPU_OP, USER_ANNOTATION)) & trace.name_table_mask(is_wait)
        sync = (trace.kind == RUNTIME) & trace.name_table_mask(is_sync_call)
        return np.flatnonzero((host | sync) & (trace.dur > 0))
    return trace.cached("wait_rows", compute)


def waiting(trace: Trace, tid: int | None = None) -> Coverage:
    """Time a thread (every thread, with tid=None: their union) spends in blocking waits."""
    cache = trace.cached("waiting", dict)
    if tid not in cache:
        rows = wait_rows(trace)
        if tid is not None:
            rows = rows[trace.tid[rows] == tid]
        cache[tid] = Coverage(trace.ts[rows], trace.end[rows])
    return cache[tid]


def thread_waits(trace: Trace, windows: Windows, top: int = 5) -> dict:
    """Per host thread inside the windows: the time it shows activity and the share of it spent waiting.

    `busy_us` is time covered by the thread's recorded ranges (ops, Python frames, runtime calls) outside
    waits: the work it did. `wait_pct` of a process is its waits over the recorded time of its threads."""
    host = np.flatnonzero(np.isin(trace.kind, (PYTHON, CPU_OP, USER_ANNOTATION, RUNTIME)) & (trace.dur > 0))
    win = (windows.start, windows.end)
    threads, waits = [], Counter()
    recorded = waited = 0.0
    for tid in distinct(trace.tid[host]).tolist():
        mine = host[trace.tid[host] == tid]
        active = intersect(win, merge(trace.ts[mine], trace.end[mine]))
        active_us = float((active[1] - active[0]).sum())
        if active_us <= 0:
            continue
        w = intersect(win, (waiting(trace, tid).s, waiting(trace, tid).e))
        wait_us = float((w[1] - w[0]).sum())
        recorded += active_us
        waited += wait_us
        threads.append({"tid": int(tid), "active_us": active_us, "wait_us": wait_us,
                        "busy_us": active_us - wait_us, "wait_pct": 100.0 * wait_us / active_us})
    rows = wait_rows(trace)
    inside = rows[Coverage(*win).covered(trace.ts[rows], trace.end[rows]) > 0]
    for r in _outermost(trace, inside).tolist():
        waits[trace.name_of(r)] += float(trace.dur[r])
    threads.sort(key=lambda t: -t["active_us"])
    return {"threads": threads, "recorded_us": recorded, "wait_us": waited,
            "busy_us": recorded - waited, "wait_pct": 100.0 * waited / recorded if recorded else 0.0,
            "top_waits": [{"name": n, "us": us} for n, us in waits.most_common(top)]}


def _outermost(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """The waits not inside another wait of the same thread (a poll inside select inside connection.wait)."""
    out = []
    for tid in distinct(trace.tid[rows]).tolist():
        mine = rows[trace.tid[rows] == tid]
        mine = mine[np.lexsort((-trace.dur[mine], trace.ts[mine]))]
        reach = np.maximum.accumulate(trace.end[mine])
        keep = np.ones(mine.size, dtype=bool)
        keep[1:] = trace.ts[mine][1:] >= reach[:-1]
        out.append(mine[keep])
    return np.concatenate(out) if out else rows
