"""Which compute a host<->device copy could overlap without breaking a data dependency.

A copy can only run beside compute that neither produces its data nor consumes it. The trace does not
hold tensor addresses, so the argument is causal, from the host thread that launched the copy:

- host-to-device: the host cannot have built the copy's source from results of kernels it launched
  after its last wait on the GPU, so those kernels (run before the copy) are independent of it; kernels
  launched after the copy and before the first op that takes a tensor of the copy's shape (its
  consumer, from `record_shapes`) do not read it either. Compute the host had waited for before
  launching the copy may have produced its data (a decode loop's next token): cannot tell.
- device-to-host: kernels the host launched after the copy and before it waited for the copy cannot
  use the copied value, so the copy could run beside them; the kernel before it wrote what it copies.
  Compute launched after that wait may need the value on the host: cannot tell.

Per copy the part of its exposed time (no kernel beside it) that such compute could hide is
`independent`; the part only compute of unknown relation could hide is `unknown`; the rest is
`dependent` (no compute but its producer or consumer is near it).
"""
from __future__ import annotations

import json

import numpy as np

from perflab.analysis.idle.intervals import Coverage
from perflab.analysis.steps.links import launch_of
from perflab.analysis.idle.syncs import sync_rows
from perflab.trace.model import CPU_OP, Trace

_CONSUMER_LOOKAHEAD = 64  # top-level ops after the copy searched for its consumer


def _shape_of(trace: Trace, op: int) -> tuple | None:
    """The copied tensor's sizes: the first input of aten::to / aten::copy_ ..."""
    if op < 0 or trace.shape[op] < 0:
        return None
    try:
        dims = json.loads(trace.shapes[int(trace.shape[op])])
    except (ValueError, TypeError):
        return None
    first = dims[0] if isinstance(dims, list) and dims else None
    return tuple(first) if isinstance(first, list) and first else None


def _takes(trace: Trace, op: int, shape: tuple) -> bool:
    if trace.shape[op] < 0:
        return False
    try:
        dims = json.loads(trace.shapes[int(trace.shape[op])])
    except (ValueError, TypeError):
        return False
    return any(isinstance(d, list) and tuple(d) == shape for d in dims)


class _Thread:
    """One host thread: its top-level ops and the times it waited on the GPU."""

    def __init__(self, trace: Trace, tid: int, copy_calls: np.ndarray, copies: np.ndarray) -> None:
        ops = np.flatnonzero((trace.kind == CPU_OP) & (trace.tid == tid))
        ops = ops[np.lexsort((-trace.dur[ops], trace.ts[ops]))]
        ends = np.nan_to_num(trace.end[ops], nan=0.0)
        before = np.concatenate(([-np.inf], np.maximum.accumulate(ends)[:-1])) if ops.size else ends
        self.tops = ops[trace.ts[ops] >= before]
        waits = sync_rows(trace)
        waits = waits[trace.tid[waits] == tid]
        mine = trace.tid[copy_calls] == tid
        blocking = copy_calls[mine & (trace.end[copy_calls] >= trace.end[copies] - 1.0)]  # a pageable copy waits
        waits = np.concatenate((waits, blocking))
        order = np.argsort(trace.end[waits], kind="stable")
        self.wait_start, self.wait_end = trace.ts[waits][order], trace.end[waits][order]

    def last_wait_end(self, t: float) -> float:
        i = np.searchsorted(self.wait_end, t + 1.0, side="right")  # within 1 µs: timestamp rounding
        return float(self.wait_end[i - 1]) if i else -np.inf

    def wait_for(self, gpu_end: float) -> float:
        """When the host began the first wait that returned after the GPU finished `gpu_end`."""
        i = np.searchsorted(self.wait_end, gpu_end - 1.0)
        return float(self.wait_start[i]) if i < self.wait_end.size else np.inf

    def enclosing_top(self, trace: Trace, t: float) -> int:
        i = np.searchsorted(trace.ts[self.tops], t, side="right") - 1
        return int(self.tops[i]) if i >= 0 and trace.end[self.tops[i]] >= t else -1

    def consumer_start(self, trace: Trace, op: int, shape: tuple) -> float | None:
        """Start of the first top-level op after `op` that takes a tensor of `shape`; None if not found."""
        i = np.searchsorted(trace.ts[self.tops], trace.end[op] - 1e-6)
        for j in self.tops[i:i + _CONSUMER_LOOKAHEAD].tolist():
            if j != op and _takes(trace, j, shape):
                return float(trace.ts[j])
        return None


class _Launched:
    """The kernels one host thread launched, by launch time: GPU time covered by those launched in a range."""

    def __init__(self, trace: Trace, kernels: np.ndarray, launch_ts: np.ndarray) -> None:
        order = np.argsort(launch_ts, kind="stable")
        self.ts, rows = launch_ts[order], kernels[order]
        self.start, self.end = trace.ts[rows], trace.end[rows]
        self.cover = Coverage(self.start, self.end)

    def busy(self, lo: float, hi: float, gpu_before: float = np.inf) -> float:
        """GPU time of the kernels launched in [lo, hi), up to `gpu_before` (in order on one stream, the kernels
        of a launch range run back to back; on several streams this is the span they cover)."""
        i, j = np.searchsorted(self.ts, lo), np.searchsorted(self.ts, hi)
        if j <= i:
            return 0.0
        top = min(float(self.end[i:j].max()), gpu_before)
        return float(self.cover.covered(float(self.start[i:j].min()), top)) if top > self.start[i:j].min() else 0.0


def copy_dependencies(trace: Trace, copies: np.ndarray, kernels: np.ndarray, directions: list[str]) -> dict:
    """Per copy row: exposed, independent and unknown µs (see the module doc), and how it was told."""
    links = launch_of(trace)
    k_launch = links[kernels]
    known = k_launch >= 0
    k_ts, k_tid = trace.ts[k_launch[known]], trace.tid[k_launch[known]]
    everything = Coverage(trace.ts[kernels], trace.end[kernels])
    calls = links[copies]
    threads: dict[int, tuple[_Thread, _Launched]] = {}
    out = {"exposed_us": np.zeros(copies.size), "independent_us": np.zeros(copies.size),
           "unknown_us": np.zeros(copies.size), "consumers_found": 0, "consumers_sought": 0}
    if copies.size:
        out["exposed_us"] = trace.dur[copies] - everything.covered(trace.ts[copies], trace.end[copies])
    for i, (r, call, d) in enumerate(zip(copies.tolist(), calls.tolist(), directions)):
        exposed = float(out["exposed_us"][i])
        if exposed <= 0 or d not in ("h2d", "d2h"):
            continue
        if call < 0:  # no launch record: nothing to reason from
            out["unknown_us"][i] = min(exposed, everything.total())
            continue
        tid, t_call = int(trace.tid[call]), float(trace.ts[call])
        if tid not in threads:
            mine = k_tid == tid
            threads[tid] = (_Thread(trace, tid, calls[calls >= 0], copies[calls >= 0]),
                            _Launched(trace, kernels[known][mine], k_ts[mine]))
        th, launched = threads[tid]
        if d == "h2d":
            waited = th.last_wait_end(t_call)
            free = launched.busy(waited, t_call)
            unsure = launched.busy(-np.inf, waited, gpu_before=float(trace.ts[r]) + 1.0)
            op = th.enclosing_top(trace, t_call)
            shape = _shape_of(trace, op)
            if shape is not None:
                out["consumers_sought"] += 1
                consumer = th.consumer_start(trace, op, shape)
                if consumer is not None:
                    out["consumers_found"] += 1
                    free += launched.busy(t_call + 1e-6, consumer)
        else:
            host_waits = th.wait_for(float(trace.end[r]))
            free = launched.busy(t_call + 1e-6, host_waits)
            unsure = launched.busy(host_waits, np.inf)
        independent = min(exposed, free)
        out["independent_us"][i] = independent
        out["unknown_us"][i] = min(exposed - independent, unsure)
    return out
