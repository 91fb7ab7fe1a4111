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

from perflab.analysis.syncs import is_sync_call
from perflab.trace.model import GPU_WORK_KINDS, RUNTIME, Trace

EPS_US = 0.5    # timestamps of linked events from different clocks differ by this much


@dataclass
class CriticalPath:
    rows: list[int]                       # trace rows on the path, in time order
    span_us: float                        # from the path's first start to its last end
    by_lane: dict[str, float] = field(default_factory=dict)   # time on the path per stream / host thread
    waiting_us: float = 0.0               # gaps on the path where nothing recorded runs
    gpu_rows: set[int] = field(default_factory=set)

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
                "gpu_on_path_pct": round(100 * float(sum(v for k, v in self.by_lane.items() if k.startswith("stream")))
                                         / total, 1) if total else 0.0}


def _lane(trace: Trace, r: int) -> str:
    return f"stream {int(trace.stream[r])}" if trace.kind[r] in GPU_WORK_KINDS else f"thread {int(trace.tid[r])}"


def critical_path(trace: Trace, t0: float | None = None, t1: float | None = None) -> CriticalPath:
    """The critical path of the work that lies within [t0, t1] (default: the whole trace)."""
    dur = np.nan_to_num(trace.dur, nan=0.0)
    end = trace.ts + dur
    gpu_mask = np.isin(trace.kind, list(GPU_WORK_KINDS))
    rt_mask = trace.kind == RUNTIME
    keep = gpu_mask | rt_mask
    if t0 is not None:
        keep &= trace.ts >= t0
    if t1 is not None:
        keep &= end <= t1
    rows = np.flatnonzero(keep)
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
    waiting = 0.0
    covered_to = trace.ts[path[0]]
    for r in path:
        start = max(trace.ts[r], covered_to)
        if trace.ts[r] > covered_to:
            waiting += trace.ts[r] - covered_to
        lanes[_lane(trace, r)] = lanes.get(_lane(trace, r), 0.0) + max(0.0, end[r] - start)
        covered_to = max(covered_to, end[r])
    return CriticalPath(rows=path, span_us=float(end[path[-1]] - trace.ts[path[0]]), by_lane=lanes,
                        waiting_us=float(waiting), gpu_rows={r for r in path if gpu_mask[r]})
