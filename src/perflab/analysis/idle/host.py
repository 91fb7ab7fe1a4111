"""What the host threads are doing: CPU work that launches nothing, data loading, copies."""
from __future__ import annotations

import re

import numpy as np

from perflab.analysis.idle.intervals import Coverage, difference
from perflab.analysis.steps.links import launch_rows
from perflab.trace.model import CPU_OP, PYTHON, RUNTIME, STEP_RE, Trace, USER_ANNOTATION, distinct

_DATALOADER = re.compile(r"DataLoader|dataloader|_DataLoaderIter|data_loader", re.I)
_MEMCPY_CALL = re.compile(r"(cuda|hip|cu)Memcpy", re.I)
_PROFILER_FRAME = re.compile(r"^torch/(profiler/|autograd/profiler)")
MAJORITY = 0.5


def _cpu_rows(trace: Trace) -> np.ndarray:
    """Host ranges other than the steps themselves (ProfilerStep#N, or the annotations found as steps). A trace
    with no operator rows (Nsight Systems on a CUDA program) records the host only through its CUDA calls: there
    the calls that neither synchronize nor copy (those are waits, analysis.idle.gaps) are the host's recorded work
    (cudaMalloc, module loading, ...)."""
    from perflab.analysis.steps.windows import profiler_steps

    def compute() -> np.ndarray:
        host = np.isin(trace.kind, (CPU_OP, PYTHON, USER_ANNOTATION))
        if trace.meta.get("host_ops_from_runtime"):
            from perflab.analysis.idle.syncs import sync_rows

            calls = (trace.kind == RUNTIME) & ~trace.name_table_mask(lambda n: _MEMCPY_CALL.match(n) is not None)
            calls[sync_rows(trace)] = False
            host |= calls
        not_step = ~trace.name_table_mask(lambda n: STEP_RE.fullmatch(n.strip()) is not None)
        not_step[profiler_steps(trace).rows] = False
        return np.flatnonzero(host & not_step & (trace.dur > 0))
    return trace.cached("host_cpu_rows", compute)


def launches_inside(trace: Trace) -> np.ndarray:
    """Per CPU row (see _cpu_rows): did its thread make a GPU launch inside it (the first launch at or after its
    start comes by its end)?"""
    def compute() -> np.ndarray:
        rows = _cpu_rows(trace)
        launches = launch_rows(trace)
        out = np.zeros(rows.size, dtype=bool)
        row_tid, launch_tid = trace.tid[rows], trace.tid[launches]
        for tid in distinct(row_tid).tolist():
            on = row_tid == tid
            lts = np.sort(trace.ts[launches[launch_tid == tid]])
            if lts.size == 0:
                continue
            r = rows[on]
            i = np.searchsorted(lts, trace.ts[r], "left")
            out[on] = (i < lts.size) & (lts[np.minimum(i, lts.size - 1)] <= trace.end[r])
        return out
    return trace.cached("launches_inside", compute)


def _host_kinds(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per CPU row (see _cpu_rows): its thread; quiet (launches nothing, not data loading); a launching CPU op."""
    def compute() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rows = _cpu_rows(trace)
        launching = launches_inside(trace)
        quiet = ~launching & ~_named(trace, rows, _DATALOADER)
        return trace.tid[rows], quiet, launching & (trace.kind[rows] == CPU_OP)
    return trace.cached("host_kinds", compute)


def host_work(trace: Trace, tid: int, min_op_us: float = 0.0) -> Coverage:
    """Time on `tid` spent in CPU ops that launch no GPU work and are not part of an op that does.

    An aten::empty inside aten::add is part of launching the add kernel; an aten::cat on CPU tensors,
    a tokenizer or a preprocessing function at the top level is host compute. With `min_op_us`, only
    ops at least that long count (a stream of µs-long view ops is the eager dispatch path, not work).
    """
    cache = trace.cached("host_work", dict)
    key = (tid, float(min_op_us))
    if key not in cache:
        rows = _cpu_rows(trace)
        row_tid, quiet, launching = _host_kinds(trace)
        mine = row_tid == tid
        quiet = rows[mine & quiet & (trace.dur[rows] >= min_op_us) if min_op_us else mine & quiet]
        launching = rows[mine & launching]
        spans = difference((trace.ts[quiet], trace.end[quiet]), (trace.ts[launching], trace.end[launching]))
        cache[key] = Coverage(*spans)
    return cache[key]


def _named(trace: Trace, rows: np.ndarray, pattern: re.Pattern) -> np.ndarray:
    return trace.name_table_mask(lambda n: pattern.search(n) is not None)[rows]


def dataloader(trace: Trace) -> Coverage:
    """Time inside DataLoader iteration (any thread)."""
    def compute() -> Coverage:
        rows = _cpu_rows(trace)
        sel = rows[_named(trace, rows, _DATALOADER)]
        return Coverage(trace.ts[sel], trace.end[sel])
    return trace.cached("dataloader", compute)


def profiler_bookkeeping(trace: Trace) -> Coverage:
    """Time inside torch.profiler's own Python frames (prof.step() between steps, stopping the trace):
    the measurement's cost, not the workload's. Only traces recorded with_stack=True name them."""
    def compute() -> Coverage:
        rows = np.flatnonzero(trace.kind == PYTHON)
        sel = rows[_named(trace, rows, _PROFILER_FRAME)]
        return Coverage(trace.ts[sel], trace.end[sel])
    return trace.cached("profiler_bookkeeping", compute)


def memcpy_calls(trace: Trace) -> np.ndarray:
    """Runtime memcpy calls (the host is busy staging or waiting for a copy while inside them)."""
    return trace.cached("memcpy_calls", lambda: np.flatnonzero(
        (trace.kind == RUNTIME) & trace.name_table_mask(lambda n: _MEMCPY_CALL.match(n) is not None)))


def top_host_ops(trace: Trace, tid: int, lo: np.ndarray, hi: np.ndarray, top: int = 5) -> list[tuple[int, float]]:
    """Quiet (non-launching) ops on `tid` overlapping the intervals most, one per name: (row, overlap µs)."""
    rows = _cpu_rows(trace)
    quiet = rows[(_host_kinds(trace)[0] == tid) & ~launches_inside(trace)]
    if quiet.size == 0 or lo.size == 0:
        return []
    quiet = quiet[np.lexsort((-trace.dur[quiet], trace.ts[quiet]))]
    reach = np.maximum.accumulate(trace.end[quiet])
    outermost = np.concatenate(([True], trace.end[quiet][1:] > reach[:-1]))
    quiet = quiet[outermost]
    amount = Coverage(lo, hi).covered(trace.ts[quiet], trace.end[quiet])
    hit = amount > 0
    quiet, amount = quiet[hit], amount[hit]
    if quiet.size == 0:
        return []
    per_name = np.bincount(trace.name[quiet], weights=amount)
    order = np.argsort(-amount, kind="stable")
    best: dict[int, int] = {}
    for i in order.tolist():
        best.setdefault(int(trace.name[quiet[i]]), int(quiet[i]))
    names = sorted(best, key=lambda k: -per_name[k])[:top]
    return [(best[k], float(per_name[k])) for k in names]


def ops_holding_gaps(trace: Trace, tid: int, lo: np.ndarray, hi: np.ndarray, top: int = 5,
                     max_gaps: int = 500) -> list[tuple[int, float]]:
    """The CPU ops the host thread was inside while the GPU waited, one per name: (row, µs).

    Each gap [lo, hi) goes to the innermost op on `tid` that covers most of it, whether or not that op
    launches GPU work: an op that spends 30 ms on the CPU (building a cuDNN plan, say) before
    launching a 4 µs kernel holds the GPU idle as surely as a tokenizer. Gaps no single op covers go
    to the quiet ops overlapping them (top_host_ops). Only the `max_gaps` longest gaps are examined.
    """
    if lo.size == 0:
        return []
    rows = _cpu_rows(trace)
    rows = rows[trace.tid[rows] == tid]
    order = np.argsort(-(hi - lo), kind="stable")[:max_gaps]
    near = _Near(trace.ts[rows], trace.end[rows], trace.dur[rows])
    amount: dict[int, float] = {}
    exemplar: dict[int, int] = {}
    rest = []
    for g, a, b in zip(order.tolist(), lo[order].tolist(), hi[order].tolist()):
        span = b - a
        h = near.holder(a, b)
        if h < 0:
            rest.append(g)
            continue
        r = int(rows[h])
        name = int(trace.name[r])
        amount[name] = amount.get(name, 0.0) + span
        if name not in exemplar or trace.dur[r] > trace.dur[exemplar[name]]:
            exemplar[name] = r
    if rest:
        idx = np.asarray(rest)
        for r, amt in top_host_ops(trace, tid, lo[idx], hi[idx], top=top):
            name = int(trace.name[r])
            amount[name] = amount.get(name, 0.0) + amt
            exemplar.setdefault(name, r)
    names = sorted(amount, key=lambda k: -amount[k])[:top]
    return [(exemplar[k], amount[k]) for k in names]


class _Near:
    """The ops that can overlap [a, b]: all of them for a few ops; else the longest ones (fewer than _LONG) and
    those no longer than the rest that start within twice that length before a (a margin, so rounding never drops
    one) up to b. A superset of the overlapping ones: each part kept with its ops' start, end and length in its
    own order (the long ones by index, the rest by start), so a gap reads slices, not gathers."""

    def __init__(self, ts: np.ndarray, end: np.ndarray, dur: np.ndarray) -> None:
        if ts.size <= 4 * _LONG:
            self.limit = None
            long = np.arange(ts.size)
            short = long[:0]
        else:
            self.limit = float(np.partition(dur, ts.size - _LONG)[ts.size - _LONG])
            long = np.flatnonzero(~(dur <= self.limit))
            short = np.flatnonzero(dur <= self.limit)
            short = short[np.argsort(ts[short], kind="stable")]
        self.parts = [(i, ts[i], end[i], dur[i]) for i in (long, short)]

    def holder(self, a: float, b: float) -> int:
        """The shortest op covering at least half of [a, b] (of equals, the first by index), -1 if none."""
        span = b - a
        best = (np.inf, -1)
        for k, (idx, ts, end, dur) in enumerate(self.parts):
            if k == 1:
                if self.limit is None:
                    break
                i = int(np.searchsorted(ts, a - 2 * self.limit, side="left"))
                j = int(np.searchsorted(ts, b, side="right"))
                idx, ts, end, dur = idx[i:j], ts[i:j], end[i:j], dur[i:j]
            ok = (np.minimum(end, b) - np.maximum(ts, a)) >= MAJORITY * span
            if not ok.any():
                continue
            d = dur[ok]
            m = float(d.min())
            first = int(idx[ok][d == m].min())
            if (m, first) < best or best[1] < 0:
                best = (m, first)
        return best[1]


_LONG = 1024


def _call_durations(trace: Trace, name: str) -> np.ndarray:
    """µs of every call of host op `name`, in call order (empty when the trace has none)."""
    if name not in trace.names:
        return np.empty(0)
    rows = _cpu_rows(trace)
    rows = rows[trace.name[rows] == trace.names.index(name)]
    return trace.dur[rows[np.argsort(trace.ts[rows], kind="stable")]].astype(float)


WARMUP_RATIO = 10.0       # a first call this many times the median of the later ones is warm-up
WARMUP_MIN_US = 50_000.0  # and long enough to matter (50 ms)


def first_call_outlier(trace: Trace, name: str) -> dict | None:
    """Warm-up inside the profiled window: the first call of host op `name` takes >= WARMUP_RATIO x the
    median of its later calls (lazy initialization, a cuDNN/cuBLAS plan or autotune, a compilation) and
    at least WARMUP_MIN_US. Returns {op, calls, first_ms, median_ms, ratio} or None."""
    durs = _call_durations(trace, name)
    if durs.size < 3:
        return None
    first, median = float(durs[0]), float(np.median(durs[1:]))
    if first < WARMUP_MIN_US or first < WARMUP_RATIO * max(median, 1e-9):
        return None
    return {"op": name, "calls": int(durs.size), "first_ms": round(first / 1e3, 2), "median_ms": round(median / 1e3, 3),
            "ratio": round(first / max(median, 1e-9), 1)}


STRAY_RATIO = 20.0      # one call this many times the median of the others, when no other call comes close,
STRAY_MIN_US = 1_000.0  # and at least 1 ms: the thread was most likely descheduled, not working


def stray_call_outlier(trace: Trace, name: str) -> dict | None:
    """One call of host op `name` (not the first: that is warm-up) lasting >= STRAY_RATIO x the median of
    its other calls and >= STRAY_MIN_US, while no other call reaches 5x the median: an op that is short
    every other time, stalled once (a thread descheduled on a busy host, a page fault storm).
    Returns {op, calls, longest_ms, median_ms, ratio} or None."""
    durs = _call_durations(trace, name)
    if durs.size < 4:
        return None
    i = 1 + int(np.argmax(durs[1:]))
    longest, median = float(durs[i]), float(np.median(np.delete(durs[1:], i - 1)))
    if longest < STRAY_MIN_US or longest < STRAY_RATIO * max(median, 1e-9):
        return None
    if int(np.count_nonzero(durs >= 5 * max(median, 1e-9))) > 1:  # the first call included: two stalls are a pattern
        return None
    return {"op": name, "calls": int(durs.size), "longest_ms": round(longest / 1e3, 2),
            "median_ms": round(median / 1e3, 3), "ratio": round(longest / max(median, 1e-9), 1)}
