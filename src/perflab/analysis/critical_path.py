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


def _lane(trace: Trace, r: int) -> str:
    return f"stream {int(trace.stream[r])}" if trace.kind[r] in GPU_WORK_KINDS else f"thread {int(trace.tid[r])}"


def _selected(trace: Trace, t0: float | None, t1: float | None) -> np.ndarray:
    """The runtime calls that start within [t0, t1] and the GPU ops they launched, wherever those end (the GPU
    lags the host: a window's kernels often end after it); a GPU op with no recorded launch by its own start."""
    gpu_mask = np.isin(trace.kind, list(GPU_WORK_KINDS))
    rt_mask = trace.kind == RUNTIME
    lo = -np.inf if t0 is None else t0
    hi = np.inf if t1 is None else t1
    inside = (trace.ts >= lo) & (trace.ts <= hi)
    launch = launch_of(trace)
    launched = np.zeros(len(trace), dtype=bool)
    linked = gpu_mask & (launch >= 0)
    launched[linked] = inside[launch[linked]]
    return np.flatnonzero((rt_mask & inside) | launched | (gpu_mask & (launch < 0) & inside))


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
    dur = np.nan_to_num(trace.dur, nan=0.0)
    end = trace.ts + dur
    gpu_mask = np.isin(trace.kind, list(GPU_WORK_KINDS))
    rt_mask = trace.kind == RUNTIME
    if rows.size == 0:
        return CriticalPath([], 0.0)
    gpu = rows[gpu_mask[rows]]
    rt = rows[rt_mask[rows]]
    sync_rows = trace.name_table_mask(is_sync_call)
    launch_of = {int(trace.correlation[r]): int(r) for r in rt if trace.correlation[r] >= 0}
    by_lane = {}
    for r in rows:
        by_lane.setdefault(_lane(trace, int(r)), []).append(int(r))
    order = {k: sorted(v, key=lambda r: (trace.ts[r], end[r])) for k, v in by_lane.items()}
    pos = {r: i for v in order.values() for i, r in enumerate(v)}
    gpu_by_end = gpu[np.argsort(end[gpu], kind="stable")]
    gpu_ends = end[gpu_by_end]

    def latest_gpu_before(t: float, exclude_lane: str | None = None) -> int | None:
        i = int(np.searchsorted(gpu_ends, t + EPS_US, side="right")) - 1
        while i >= 0:
            r = int(gpu_by_end[i])
            if exclude_lane is None or _lane(trace, r) != exclude_lane:
                return r
            i -= 1
        return None

    def predecessors(r: int) -> list[int]:
        lane = _lane(trace, r)
        i = pos[r]
        out = [order[lane][i - 1]] if i > 0 else []
        if gpu_mask[r]:
            launch = launch_of.get(int(trace.correlation[r]))
            if launch is not None:
                out.append(launch)
            ready = max((end[p] for p in out), default=-np.inf)
            if trace.ts[r] - ready > EPS_US:   # started later than its stream and its launch allowed: a wait
                other = latest_gpu_before(trace.ts[r], lane)
                if other is not None and end[other] > ready:
                    out.append(other)
        elif sync_rows[r]:
            waited = latest_gpu_before(end[r])
            if waited is not None and end[waited] >= trace.ts[r]:
                out.append(waited)
        return [p for p in out if end[p] <= trace.ts[r] + EPS_US or (not gpu_mask[r] and gpu_mask[p])]

    cur = int(rows[np.argmax(end[rows])])
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
    covered_to = trace.ts[path[0]]
    for r in path:
        start = max(trace.ts[r], covered_to)
        if trace.ts[r] > covered_to:
            waiting += trace.ts[r] - covered_to
        took = max(0.0, end[r] - start)
        lanes[_lane(trace, r)] = lanes.get(_lane(trace, r), 0.0) + took
        kinds[_KINDS.get(int(trace.kind[r]), "host")] = kinds.get(_KINDS.get(int(trace.kind[r]), "host"), 0.0) + took
        if took > 0:
            on_path[r] = (float(start), float(end[r]))
        covered_to = max(covered_to, end[r])
    return CriticalPath(rows=path, span_us=float(end[path[-1]] - trace.ts[path[0]]), by_lane=lanes,
                        waiting_us=float(waiting), gpu_rows={r for r in path if gpu_mask[r]}, by_kind=kinds,
                        on_path=on_path)
