"""The step's critical path: the chain of work and waits that sets its length, on traces with several streams.

Walked backward from the work that ends last: at each event, what made it start when it did is the
predecessor that finished latest before it (the event waits for all of them; the last one to finish is the
one it waited for):
- GPU work: the previous op on its stream, the runtime call that launched it (correlation id), and, when it
  started after both, the op on another stream that finished just before it (an event wait, a collective);
- a runtime call on a host thread: the previous call on that thread, and for a synchronizing call
  (cudaStreamSynchronize, cudaEventSynchronize, cudaDeviceSynchronize, a blocking copy) the GPU op it waited for.
Time between a predecessor's end and the event's start is waiting on nothing recorded (host code, launch
latency). A kernel off the path is overlapped by the chain that sets the step: removing it saves nothing;
a kernel on it saves at most its own time. HTA's critical-path analysis builds the same kind of graph
(benchmarks/critical_path_vs_hta.py compares them). Pure: a function of the trace.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from perflab.analysis.steps.links import launch_of, match
from perflab.analysis.idle.syncs import is_sync_call
from perflab.trace.model import GPU_WORK_KINDS, KERNEL, MEMCPY, MEMSET, RUNTIME, Trace

EPS_US = 0.5    # timestamps of linked events from different clocks differ by this much
_KINDS = {KERNEL: "kernel", MEMCPY: "copy", MEMSET: "memset"}


@dataclass
class CriticalPath:
    rows: list[int]                       # trace rows on the path, in time order
    span_us: float                        # from the path's first start to its last end
    by_lane: dict[str, float] = field(default_factory=dict)   # time on the path per stream / host thread
    waiting_us: float = 0.0               # gaps on the path where nothing recorded runs
    gpu_rows: set[int] = field(default_factory=set)
    by_kind: dict[str, float] = field(default_factory=dict)   # time on the path: kernel, copy, memset, host
    on_path: dict[int, tuple[float, float]] = field(default_factory=dict)   # row -> the stretch the path spends in it

    def saving_us(self, rows: np.ndarray | list[int], trace: Trace) -> float:
        """What removing these GPU ops could save on the step: their time on the critical path."""
        return float(sum(trace.dur[r] for r in rows if int(r) in self.gpu_rows))

    def setter(self) -> str:
        """The lane that holds most of the path: the chain that sets the step time."""
        return max(self.by_lane, key=self.by_lane.get) if self.by_lane else ""

    def to_dict(self) -> dict[str, Any]:
        total = sum(self.by_lane.values()) + self.waiting_us
        return {"span_us": round(float(self.span_us), 3), "events": len(self.rows), "sets_the_step": self.setter(),
                "by_lane_us": {k: round(float(v), 3) for k, v in sorted(self.by_lane.items(), key=lambda x: -x[1])},
                "waiting_us": round(float(self.waiting_us), 3),
                "by_category_pct": {k: round(100 * float(v) / total, 1) for k, v in
                                    sorted({**self.by_kind, "waiting": self.waiting_us}.items(), key=lambda x: -x[1])}
                if total else {},
                "gpu_on_path_pct": round(100 * float(sum(v for k, v in self.by_lane.items() if k.startswith("stream")))
                                         / total, 1) if total else 0.0}


class _Graph:
    """What every window's walk reads, computed once per trace (whole-trace passes cost more than a window's walk):
    the GPU, runtime and synchronizing-call masks, and the rows a window can select, sorted by the time that
    selects them (_selected). Not kept on the trace: it is as large as several columns."""

    def __init__(self, trace: Trace) -> None:
        self.gpu = np.isin(trace.kind, list(GPU_WORK_KINDS))
        self.rt = trace.kind == RUNTIME
        self.sync = trace.name_table_mask(is_sync_call)
        # a runtime call is selected by its start, a GPU op by its launch's start (its own without a launch)
        launch = launch_of(trace)
        selectable = np.flatnonzero(self.rt | self.gpu)
        key = trace.ts[selectable]
        linked = launch[selectable] >= 0
        key[linked] = trace.ts[launch[selectable[linked]]]
        order = np.argsort(key, kind="stable")
        self.by_key = selectable[order]
        self.keys = key[order]


def _selected(trace: Trace, t0: float | None, t1: float | None, graph: _Graph | None = None) -> np.ndarray:
    """The runtime calls that start within [t0, t1] and the GPU ops they launched, wherever those end (the GPU
    lags the host: a window's kernels often end after it); a GPU op with no recorded launch by its own start."""
    g = graph or _Graph(trace)
    lo = 0 if t0 is None else int(np.searchsorted(g.keys, t0, side="left"))
    hi = int(np.searchsorted(g.keys, np.inf if t1 is None else t1, side="right"))
    return np.sort(g.by_key[lo:hi])


def critical_path(trace: Trace, t0: float | None = None, t1: float | None = None,
                  graph: _Graph | None = None) -> CriticalPath:
    """The critical path of the work issued within [t0, t1] (default: the whole trace): the runtime calls that
    start in it and the GPU work they launched."""
    graph = graph or _Graph(trace)
    return _walk(trace, _selected(trace, t0, t1, graph), graph)


def step_critical_path(trace: Trace, windows) -> CriticalPath:
    """The critical paths of each analysis window (analysis.steps.windows.Windows), summed: lanes, waits and spans add
    up, rows and their on-path intervals are the union."""
    total = CriticalPath([], 0.0)
    graph = _Graph(trace)
    for a, b in zip(windows.start.tolist(), windows.end.tolist()):
        cp = critical_path(trace, a, b, graph)
        total.rows += cp.rows
        total.span_us += cp.span_us
        total.waiting_us += cp.waiting_us
        total.gpu_rows |= cp.gpu_rows
        total.on_path.update(cp.on_path)
        for k, v in cp.by_lane.items():
            total.by_lane[k] = total.by_lane.get(k, 0.0) + v
        for k, v in cp.by_kind.items():
            total.by_kind[k] = total.by_kind.get(k, 0.0) + v
    return total


def _walk(trace: Trace, rows: np.ndarray, g: _Graph) -> CriticalPath:
    if rows.size == 0:
        return CriticalPath([], 0.0)
    # local indices into `rows`; every row's predecessors at once (_predecessors), then the chain is followed
    ts_a, gpu_a = trace.ts[rows], g.gpu[rows]
    end_a = ts_a + np.nan_to_num(trace.dur[rows], nan=0.0)
    preds = _predecessors(trace, g, rows, ts_a, end_a, gpu_a)
    choice = _latest(preds, end_a, gpu_a).tolist()
    cur = int(np.argmax(end_a))
    path = [cur]
    seen = {cur}
    while True:
        nxt = choice[cur]
        if nxt < 0:
            break
        if nxt in seen:  # a cycle through near-equal times: the latest of the predecessors not yet on the path
            left = [p for p in preds[cur].tolist() if p >= 0 and p not in seen]
            if not left:
                break
            nxt = max(left, key=lambda p: (float(end_a[p]), bool(gpu_a[p])))
        cur = nxt
        path.append(cur)
        seen.add(cur)
    path.reverse()
    at = np.asarray(path)
    rows_p, ts_p, end_p, gpu_p = rows[at], ts_a[at], end_a[at], gpu_a[at]
    # the Python walk's running sums, by array passes in path order (accumulate adds left to right, as it did):
    # each event runs on the path from the later of its start and the end of all before it, to its end
    covered = np.fmax.accumulate(np.concatenate(([ts_p[0]], end_p[:-1])))
    start = np.where(covered > ts_p, covered, ts_p)
    gap = ts_p - covered
    waiting = 0.0 + float(np.add.accumulate(np.where(gap > 0, gap, 0.0))[-1])
    took = end_p - start
    took = np.where(took > 0, took, 0.0)
    lane_key = np.where(gpu_p, trace.stream[rows_p], trace.tid[rows_p])
    lanes = _sums_in_order(took, gpu_p.astype(np.int64), lane_key,
                           lambda on_gpu, k: f"stream {k}" if on_gpu else f"thread {k}")
    kinds = _sums_in_order(took, trace.kind[rows_p].astype(np.int64), None, lambda k, _: _KINDS.get(k, "host"))
    held = took > 0
    on_path = dict(zip(rows_p[held].tolist(), zip(start[held].tolist(), end_p[held].tolist())))
    rows_l = rows_p.tolist()
    return CriticalPath(rows=rows_l, span_us=float(end_p[-1] - ts_p[0]), by_lane=lanes, waiting_us=waiting,
                        gpu_rows=set(rows_p[gpu_p].tolist()), by_kind=kinds, on_path=on_path)


def _sums_in_order(values: np.ndarray, a: np.ndarray, b: np.ndarray | None, name) -> dict[str, float]:
    """Per name (name(a, b) of each element's key), the sum of its `values` added left to right, names in the order
    they first appear: the dict the walk filled one event at a time."""
    ua, ia = np.unique(a, return_inverse=True)
    ub, ib = np.unique(b if b is not None else np.zeros_like(a), return_inverse=True)
    codes, inverse = np.unique(ia.ravel() * ub.size + ib.ravel(), return_inverse=True)
    names = [name(int(ua[c // ub.size]), int(ub[c % ub.size])) for c in codes.tolist()]
    distinct = list(dict.fromkeys(names))
    label = np.array([distinct.index(n) for n in names], dtype=np.int64)[inverse.ravel()]
    ids, first = np.unique(label, return_index=True)
    return {distinct[i]: 0.0 + float(np.add.accumulate(values[label == i])[-1])
            for i in ids[np.argsort(first)].tolist()}


def _latest_gpu_before(t: np.ndarray, gpu_by_end: np.ndarray, gpu_ends: np.ndarray, lanes: np.ndarray,
                       exclude: np.ndarray | None) -> np.ndarray:
    """Per time: the GPU op (local index) that ended last by t + EPS_US, on another lane than `exclude` where
    given; -1 if none. A run of same-lane neighbours in end order is skipped at once."""
    i = np.searchsorted(gpu_ends, t + EPS_US, side="right") - 1
    if exclude is not None and gpu_by_end.size:
        by_end_lane = lanes[gpu_by_end]
        starts = np.zeros(gpu_by_end.size, dtype=np.int64)
        changes = np.flatnonzero(by_end_lane[1:] != by_end_lane[:-1]) + 1
        starts[changes] = changes
        run_start = np.maximum.accumulate(starts)
        hit = (i >= 0) & (by_end_lane[np.maximum(i, 0)] == exclude)
        i = np.where(hit, run_start[np.maximum(i, 0)] - 1, i)
    return np.where(i >= 0, gpu_by_end[np.maximum(i, 0)] if gpu_by_end.size else -1, -1)


def _predecessors(trace: Trace, g: _Graph, rows: np.ndarray, ts: np.ndarray, end: np.ndarray,
                  gpu: np.ndarray) -> np.ndarray:
    """Per local row, up to three predecessors (local indices, -1 for none), in the order the walk weighs them:
    the previous op on its lane; for GPU work the runtime call that launched it, and, when it started after both,
    the op on another stream that finished just before it; for a synchronizing call the GPU op it waited for.
    Only those that ended by its start (EPS_US), or GPU ops a host call waited on."""
    n = rows.size
    lane = np.where(gpu, trace.stream[rows], trace.tid[rows])   # GPU work by stream, the rest by host thread
    local = np.arange(n)
    out = np.full((n, 3), -1, dtype=np.int64)
    # each lane's rows by (start, end), ties in row order
    on_lane = np.lexsort((local, end, ts, lane, gpu))
    same = (gpu[on_lane[1:]] == gpu[on_lane[:-1]]) & (lane[on_lane[1:]] == lane[on_lane[:-1]])
    out[on_lane[1:], 0] = np.where(same, on_lane[:-1], -1)
    corr = trace.correlation[rows]
    rt = np.flatnonzero(g.rt[rows] & (corr >= 0))
    on_gpu = np.flatnonzero(gpu)
    out[on_gpu, 1] = match(corr[rt], rt, corr[on_gpu], last=True)   # the last call of an id wins
    gpu_by_end = on_gpu[np.argsort(end[on_gpu], kind="stable")]
    gpu_ends = end[gpu_by_end]

    def end_of(col: np.ndarray) -> np.ndarray:
        return np.where(col >= 0, end[np.maximum(col, 0)], -np.inf)
    ready = np.maximum(end_of(out[on_gpu, 0]), end_of(out[on_gpu, 1]))
    late = ts[on_gpu] - ready > EPS_US   # started later than its stream and its launch allowed: a wait
    waits, ready = on_gpu[late], ready[late]
    other = _latest_gpu_before(ts[waits], gpu_by_end, gpu_ends, lane, lane[waits])
    out[waits, 2] = np.where((other >= 0) & (end_of(other) > ready), other, -1)
    syncs = np.flatnonzero(~gpu & g.sync[rows])
    waited = _latest_gpu_before(end[syncs], gpu_by_end, gpu_ends, lane, None)
    out[syncs, 1] = np.where((waited >= 0) & (end_of(waited) >= ts[syncs]), waited, -1)
    p = np.maximum(out, 0)
    kept = (end[p] <= (ts + EPS_US)[:, None]) | (~gpu[:, None] & gpu[p])
    return np.where((out >= 0) & kept, out, -1)


def _latest(preds: np.ndarray, end: np.ndarray, gpu: np.ndarray) -> np.ndarray:
    """Per row, the predecessor that ended last (a GPU op over a host call at the same end; the first of equals),
    -1 when it has none."""
    best = preds[:, 0].copy()
    for k in (1, 2):
        c = preds[:, k]
        b, cc = np.maximum(best, 0), np.maximum(c, 0)
        later = (end[cc] > end[b]) | ((end[cc] == end[b]) & gpu[cc] & ~gpu[b])
        best = np.where((c >= 0) & ((best < 0) | later), c, best)
    return best
