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

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from perflab.analysis.idle.critical_path_walk import Paths, walk_windows
from perflab.analysis.steps.links import gpu_rows, launch_of
from perflab.analysis.idle.syncs import is_sync_call
from perflab.trace.model import KERNEL, MEMCPY, MEMSET, RUNTIME, Trace

_KINDS = {KERNEL: "kernel", MEMCPY: "copy", MEMSET: "memset"}


@dataclass
class CriticalPath:
    rows: list[int]                       # trace rows on the path, in time order
    span_us: float                        # from the path's first start to its last end
    by_lane: dict[str, float] = field(default_factory=dict)   # time on the path per stream / host thread
    waiting_us: float = 0.0               # gaps on the path where nothing recorded runs
    gpu_rows: set[int] = field(default_factory=set)
    by_kind: dict[str, float] = field(default_factory=dict)   # time on the path: kernel, copy, memset, host
    # row -> the stretch the path spends in it (a dict, or an _OnPath that becomes one when first read)
    on_path: Mapping[int, tuple[float, float]] = field(default_factory=dict)

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


class _OnPath(Mapping):
    """row -> (start, end) on the path, kept as arrays until first read: a step's path holds ~150,000 rows and
    most reports never look at them (only where streams overlap). Reads as the dict built from the rows in path
    order (a row met again keeps its first place and takes the later stretch)."""

    def __init__(self, rows: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        self._arrays: tuple | None = (rows, start, end)
        self._dict: dict[int, tuple[float, float]] = {}

    def _built(self) -> dict[int, tuple[float, float]]:
        if self._arrays is not None:
            rows, start, end = self._arrays
            self._dict = dict(zip(rows.tolist(), zip(start.tolist(), end.tolist())))
            self._arrays = None
        return self._dict

    def __getitem__(self, row: int) -> tuple[float, float]:
        return self._built()[row]

    def __iter__(self):
        return iter(self._built())

    def __len__(self) -> int:
        return len(self._built())

    def __repr__(self) -> str:
        return repr(self._built())


class _Graph:
    """What every window's walk reads, computed once per trace (whole-trace passes cost more than a window's walk):
    the GPU, runtime and synchronizing-call masks, and the rows a window can select, sorted by the time that
    selects them (_selected). Not kept on the trace: it is as large as several columns."""

    def __init__(self, trace: Trace) -> None:
        self.gpu = np.zeros(len(trace), dtype=bool)
        self.gpu[gpu_rows(trace)] = True   # the GPU-work rows every analysis shares (kernels, copies, memsets)
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
    return _summed(trace, walk_windows(trace, graph, [_selected(trace, t0, t1, graph)]))


def step_critical_path(trace: Trace, windows) -> CriticalPath:
    """The critical paths of each analysis window (analysis.steps.windows.Windows), summed: lanes, waits and spans add
    up, rows and their on-path intervals are the union."""
    graph = _Graph(trace)
    return _summed(trace, walk_windows(trace, graph, [_selected(trace, a, b, graph) for a, b in
                                                      zip(windows.start.tolist(), windows.end.tolist())]))


def _summed(trace: Trace, p: Paths) -> CriticalPath:
    """The windows' paths summed in window order, each window's sums added left to right along its path as the walk
    did one event at a time: each event runs on the path from the later of its start and the end of all before it
    in its window, to its end."""
    covered = np.empty(p.rows.size)
    covered[1:] = p.end[:-1]
    firsts = p.bounds[:-1][np.diff(p.bounds) > 0]
    covered[firsts] = p.ts[firsts]
    bounds = p.bounds.tolist()
    for a, b in zip(bounds[:-1], bounds[1:]):
        covered[a:b] = np.fmax.accumulate(covered[a:b])
    start = np.where(covered > p.ts, covered, p.ts)
    gap = p.ts - covered
    gap = np.where(gap > 0, gap, 0.0)
    took = p.end - start
    took = np.where(took > 0, took, 0.0)
    lane_key = np.where(p.gpu, trace.stream[p.rows], trace.tid[p.rows])
    lanes, lane_names = _labels(p.gpu.astype(np.int64), lane_key,
                                lambda on_gpu, k: f"stream {k}" if on_gpu else f"thread {k}")
    kinds, kind_names = _labels(trace.kind[p.rows].astype(np.int64), np.zeros(p.rows.size, dtype=np.int64),
                                lambda k, _: _KINDS.get(k, "host"))
    total = CriticalPath([], 0.0)
    for a, b in zip(bounds[:-1], bounds[1:]):
        if a == b:
            continue
        total.span_us += float(p.end[b - 1] - p.ts[a])
        total.waiting_us += 0.0 + float(np.add.accumulate(gap[a:b])[-1])
        for sums, label, names in ((total.by_lane, lanes, lane_names), (total.by_kind, kinds, kind_names)):
            for k, v in _sums_in_order(took[a:b], label[a:b], names):
                sums[k] = sums.get(k, 0.0) + v
    held = took > 0
    total.rows = p.rows.tolist()
    total.gpu_rows = set(p.rows[p.gpu].tolist())
    total.on_path = _OnPath(p.rows[held], start[held], p.end[held])
    return total


def _labels(a: np.ndarray, b: np.ndarray, name) -> tuple[np.ndarray, list[str]]:
    """Per element, the index of its name (name(a, b) of its key) in the list of distinct names."""
    ua, ia = np.unique(a, return_inverse=True)
    ub, ib = np.unique(b, return_inverse=True)
    codes, inverse = np.unique(ia.ravel() * ub.size + ib.ravel(), return_inverse=True)
    names = [name(int(ua[c // ub.size]), int(ub[c % ub.size])) for c in codes.tolist()]
    distinct = list(dict.fromkeys(names))
    return np.array([distinct.index(n) for n in names], dtype=np.int64)[inverse.ravel()], distinct


def _sums_in_order(values: np.ndarray, label: np.ndarray, names: list[str]):
    """Per name, the sum of its `values` added left to right, names in the order they first appear: the dict the
    walk filled one event at a time."""
    ids, first = np.unique(label, return_index=True)
    for i in ids[np.argsort(first)].tolist():
        yield names[i], 0.0 + float(np.add.accumulate(values[label == i])[-1])
