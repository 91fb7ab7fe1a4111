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

from perflab.analysis.links import launch_of
from perflab.analysis.syncs import is_sync_call
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
    the GPU and runtime masks, ends, synchronizing calls, each row's lane (GPU rows by stream, the rest by thread) and
    the rows a window can select, sorted by the time that selects them (_selected)."""

    def __init__(self, trace: Trace) -> None:
        self.end = trace.ts + np.nan_to_num(trace.dur, nan=0.0)
        self.gpu = np.isin(trace.kind, list(GPU_WORK_KINDS))
        self.rt = trace.kind == RUNTIME
        self.sync = trace.name_table_mask(is_sync_call)
        self.lane = np.where(self.gpu, trace.stream, trace.tid)
        # a runtime call is selected by its start, a GPU op by its launch's start (its own without a launch)
        launch = launch_of(trace)
        linked = self.gpu & (launch >= 0)
        key = np.where(self.rt | self.gpu, trace.ts, np.nan)
        key[linked] = trace.ts[launch[linked]]
        self.by_key = np.argsort(key, kind="stable")
        self.keys = key[self.by_key]


def _graph(trace: Trace) -> _Graph:
    return trace.cached("critical_path_graph", lambda: _Graph(trace))


def _selected(trace: Trace, t0: float | None, t1: float | None) -> np.ndarray:
    """The runtime calls that start within [t0, t1] and the GPU ops they launched, wherever those end (the GPU
    lags the host: a window's kernels often end after it); a GPU op with no recorded launch by its own start."""
    g = _graph(trace)
    lo = 0 if t0 is None else int(np.searchsorted(g.keys, t0, side="left"))
    hi = int(np.searchsorted(g.keys, np.inf if t1 is None else t1, side="right"))
    return np.sort(g.by_key[lo:hi])


def critical_path(trace: Trace, t0: float | None = None, t1: float | None = None) -> CriticalPath:
    """The critical path of the work issued within [t0, t1] (default: the whole trace): the runtime calls that
    start in it and the GPU work they launched."""
    return _walk(trace, _selected(trace, t0, t1))


def step_critical_path(trace: Trace, windows) -> CriticalPath:
    """The critical paths of each analysis window (analysis.windows.Windows), summed: lanes, waits and spans add
    up, rows and their on-path intervals are the union."""
    total = CriticalPath([], 0.0)
    for a, b in zip(windows.start.tolist(), windows.end.tolist()):
        cp = critical_path(trace, a, b)
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


def _walk(trace: Trace, rows: np.ndarray) -> CriticalPath:
    if rows.size == 0:
        return CriticalPath([], 0.0)
    g = _graph(trace)
    # the walk runs on local indices into `rows`, over Python lists (a numpy scalar per lookup costs more)
    ts_a, end_a, gpu_a, lane_a = trace.ts[rows], g.end[rows], g.gpu[rows], g.lane[rows]
    ts, end, gpu_mask, sync_rows = ts_a.tolist(), end_a.tolist(), gpu_a.tolist(), g.sync[rows].tolist()
    corr_a = trace.correlation[rows]
    corr = corr_a.tolist()
    rt = np.flatnonzero(g.rt[rows] & (corr_a >= 0))
    launch_of = dict(zip(corr_a[rt].tolist(), rt.tolist()))   # the last call of an id wins
    # each lane's rows by (start, end), ties in row order; prev: the row before on the same lane
    local = np.arange(rows.size)
    on_lane = np.lexsort((local, end_a, ts_a, lane_a, gpu_a))
    same = (gpu_a[on_lane[1:]] == gpu_a[on_lane[:-1]]) & (lane_a[on_lane[1:]] == lane_a[on_lane[:-1]])
    prev_a = np.full(rows.size, -1, dtype=np.int64)
    prev_a[on_lane[1:]] = np.where(same, on_lane[:-1], -1)
    prev = prev_a.tolist()
    gpu = np.flatnonzero(gpu_a)
    gpu_by_end = gpu[np.argsort(end_a[gpu], kind="stable")]
    gpu_ends = end_a[gpu_by_end]
    # scanning back from a GPU op for one on another stream skips its run of same-stream neighbours at once
    by_end_lane = lane_a[gpu_by_end]
    run_start = np.arange(gpu_by_end.size)
    if run_start.size:
        changes = np.flatnonzero(by_end_lane[1:] != by_end_lane[:-1]) + 1
        starts = np.zeros(gpu_by_end.size, dtype=np.int64)
        starts[changes] = changes
        run_start = np.maximum.accumulate(starts)
    lanes_by_end, run_start, gpu_by_end_l = by_end_lane.tolist(), run_start.tolist(), gpu_by_end.tolist()
    lane_l = lane_a.tolist()

    def latest_gpu_before(t: float, exclude: int | None = None) -> int | None:
        i = int(np.searchsorted(gpu_ends, t + EPS_US, side="right")) - 1
        if i >= 0 and exclude is not None and lanes_by_end[i] == lane_l[exclude]:
            i = run_start[i] - 1
        return gpu_by_end_l[i] if i >= 0 else None

    def predecessors(r: int) -> list[int]:
        before = prev[r]
        out = [before] if before >= 0 else []
        if gpu_mask[r]:
            launch = launch_of.get(corr[r])
            if launch is not None:
                out.append(launch)
            ready = max((end[p] for p in out), default=-np.inf)
            if ts[r] - ready > EPS_US:   # started later than its stream and its launch allowed: a wait
                other = latest_gpu_before(ts[r], r)
                if other is not None and end[other] > ready:
                    out.append(other)
        elif sync_rows[r]:
            waited = latest_gpu_before(end[r])
            if waited is not None and end[waited] >= ts[r]:
                out.append(waited)
        return [p for p in out if end[p] <= ts[r] + EPS_US or (not gpu_mask[r] and gpu_mask[p])]

    cur = int(np.argmax(end_a))
    path = [cur]
    seen = {cur}
    while True:
        preds = [p for p in predecessors(cur) if p not in seen]
        if not preds:
            break
        cur = max(preds, key=lambda p: (end[p], gpu_mask[p]))
        path.append(cur)
        seen.add(cur)
    path.reverse()
    lanes: dict[str, float] = {}
    kinds: dict[str, float] = {}
    on_path: dict[int, tuple[float, float]] = {}
    waiting = 0.0
    covered_to = ts[path[0]]
    rows_l = rows.tolist()
    at = np.asarray(path)
    lane_names = [f"stream {stream}" if on_gpu else f"thread {tid}" for stream, tid, on_gpu in
                  zip(trace.stream[rows[at]].tolist(), trace.tid[rows[at]].tolist(), gpu_a[at].tolist())]
    kind_names = [_KINDS.get(k, "host") for k in trace.kind[rows[at]].tolist()]
    for i, lane, kind in zip(path, lane_names, kind_names):
        start = max(ts[i], covered_to)
        if ts[i] > covered_to:
            waiting += ts[i] - covered_to
        took = max(0.0, end[i] - start)
        lanes[lane] = lanes.get(lane, 0.0) + took
        kinds[kind] = kinds.get(kind, 0.0) + took
        if took > 0:
            on_path[rows_l[i]] = (float(start), float(end[i]))
        covered_to = max(covered_to, end[i])
    return CriticalPath(rows=[rows_l[i] for i in path], span_us=float(end[path[-1]] - ts[path[0]]), by_lane=lanes,
                        waiting_us=float(waiting), gpu_rows={rows_l[i] for i in path if gpu_mask[i]}, by_kind=kinds,
                        on_path=on_path)
