"""CUDA-graph replays tied to the ops that captured them, when the trace holds the capture.

A replay (one `cudaGraphLaunch`) runs kernels that carry its correlation id and no op: the ops that launched
them ran once, while the graph was captured. When the profiler recorded that capture (`cudaStreamBeginCapture` ...
`cudaStreamEndCapture` on one host thread), every op inside it ran on the host as usual, with its shapes, and its
launches (`cudaLaunchKernel`, `cuLaunchKernelEx`, `cudaMemsetAsync`, ...) were recorded but ran nothing on the GPU:
the graph kept them as its nodes. A graph captured on one stream runs its nodes in capture order, so the k-th GPU
op of a replay is the k-th captured launch. The match is checked launch by launch and stops at the first
disagreement: the kind (a kernel for a kernel launch, a memset for a memset, a copy for a copy), the name where
the launching op names its kernel (an Inductor Triton op is called as its kernel), and the stream (the replay's
first stream: a graph captured on several streams runs its branches side by side, out of capture order).

Which capture a replay runs is not in the trace (no graph id joins them): it is the capture, ended before the
replay, whose launches agree with the replay longest, a whole match (as many launches as GPU ops) first. When
captures of different work agree equally (one graph per batch size), the replay stays unpriced. Pure: no torch.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from perflab.analysis.steps.links import launch_of, launch_rows
from perflab.trace.model import CPU_OP, KERNEL, MEMCPY, MEMSET, RUNTIME, USER_ANNOTATION, Trace

_BEGIN = re.compile(r"^(cuda|cu|hip)StreamBeginCapture\w*$")
_END = re.compile(r"^(cuda|cu|hip)StreamEndCapture\w*$")
_LAUNCH = re.compile(r"^(cuda|cu|hip)(Launch\w*Kernel\w*|ExtLaunchKernel\w*|ModuleLaunchKernel\w*|"
                     r"Memset\w*Async\w*|Memcpy\w*Async\w*)$")
_GRAPH_LAUNCH = re.compile(r"^(cuda|cu|hip)GraphLaunch\w*$")
NAMED_BY_OP = "triton_"   # an Inductor kernel's op carries the kernel's own name
HOW_TO_RECORD = (
    "to price them, record the capture too: run torch.profiler with record_shapes=True from before the graph is "
    "captured (torch.cuda.graph, the first calls of a torch.compile(mode=\"reduce-overhead\") function, a serving "
    "engine's warm-up) through a few replays")


@dataclass(frozen=True)
class Capture:
    begin: float
    end: float
    tid: int
    launches: np.ndarray   # runtime rows of the captured launches, in order
    ops: np.ndarray        # the op that made each launch (-1: none, or an annotation)
    kinds: np.ndarray      # the GPU kind each launch makes (KERNEL, MEMSET, MEMCPY)
    names: np.ndarray      # the kernel's name id where the op names it, -1 where it does not, -2: a name no row has
    work: np.ndarray       # per launch, what decides its op's work: (name, shapes, dtypes, scalars); -1s without op


@dataclass
class ReplayMatch:
    """Per GPU row asked about: the capturing op (-1: none) and the replay it ran in (-1: none)."""
    ops: np.ndarray
    replays: np.ndarray
    stats: dict = field(default_factory=dict)


def captures(trace: Trace) -> list[Capture]:
    return trace.cached("graph_captures", lambda: _captures(trace))


def captured_launches(trace: Trace) -> np.ndarray:
    """Runtime rows of launches made while a graph was captured: they ran nothing then, by design."""
    caps = captures(trace)
    return np.concatenate([c.launches for c in caps]) if caps else np.zeros(0, dtype=np.int64)


def _captures(trace: Trace) -> list[Capture]:
    runtime = trace.kind == RUNTIME
    begins = np.flatnonzero(runtime & trace.name_table_mask(lambda n: _BEGIN.match(n.strip()) is not None))
    if not begins.size:
        return []
    ends = np.flatnonzero(runtime & trace.name_table_mask(lambda n: _END.match(n.strip()) is not None))
    launching = runtime & trace.name_table_mask(lambda n: _LAUNCH.match(n.strip()) is not None)
    launching[launch_rows(trace)] = False     # a launch that ran on the GPU was not captured
    candidates = np.flatnonzero(launching)
    host_ops = np.flatnonzero(np.isin(trace.kind, (CPU_OP, USER_ANNOTATION)) & np.isfinite(trace.dur))
    ids = {n: i for i, n in enumerate(trace.names)}
    out = []
    for b in begins[np.argsort(trace.ts[begins], kind="stable")].tolist():
        tid, t0 = int(trace.tid[b]), float(trace.ts[b])
        later = ends[(trace.tid[ends] == tid) & (trace.ts[ends] >= t0)]
        if not later.size:
            continue   # the trace stops inside the capture: its graph is incomplete
        t1 = float(trace.ts[later].min())
        rows = candidates[(trace.tid[candidates] == tid) & (trace.ts[candidates] > t0) & (trace.ts[candidates] < t1)]
        rows = rows[np.argsort(trace.ts[rows], kind="stable")]
        if not rows.size:
            continue
        mine = host_ops[(trace.tid[host_ops] == tid) & (trace.ts[host_ops] <= t1) & (trace.end[host_ops] >= t0)]
        ops = np.array([_innermost(trace, mine, r) for r in rows.tolist()], dtype=np.int64)
        out.append(Capture(t0, t1, tid, rows, ops, _kinds(trace, rows), _names(trace, ops, ids), _work(trace, ops)))
    return out


def _innermost(trace: Trace, ops: np.ndarray, launch: int) -> int:
    """The innermost CPU op around a launch (the latest to begin among those that hold it); -1 if that is an
    annotation or nothing holds it."""
    t0, t1 = trace.ts[launch], trace.end[launch]
    around = ops[(trace.ts[ops] <= t0) & (trace.end[ops] >= t1)]
    if not around.size:
        return -1
    inner = int(around[np.lexsort((trace.end[around], -trace.ts[around]))[0]])
    return inner if trace.kind[inner] == CPU_OP else -1


def _kinds(trace: Trace, rows: np.ndarray) -> np.ndarray:
    memset = trace.name_table_mask(lambda n: "Memset" in n)[rows]
    memcpy = trace.name_table_mask(lambda n: "Memcpy" in n)[rows]
    return np.where(memset, MEMSET, np.where(memcpy, MEMCPY, KERNEL)).astype(np.int8)


def _names(trace: Trace, ops: np.ndarray, ids: dict[str, int]) -> np.ndarray:
    out = np.full(ops.size, -1, dtype=np.int64)
    for i, op in enumerate(ops.tolist()):
        if op >= 0:
            name = trace.names[int(trace.name[op])]
            if name.startswith(NAMED_BY_OP):
                out[i] = ids.get(name, -2)
    return out


def _work(trace: Trace, ops: np.ndarray) -> np.ndarray:
    """Per launch: its op's name, shapes, dtypes and scalars (ids into the trace's tables), -1s without an op."""
    key = np.full((ops.size, 4), -1, dtype=np.int64)
    has = ops >= 0
    o = ops[has]
    key[has, 0], key[has, 1], key[has, 2] = trace.name[o], trace.shape[o], trace.dtype[o]
    if trace.concrete is not None:
        key[has, 3] = trace.concrete[o]
    return key


def replayed_ops(trace: Trace, rows: np.ndarray) -> ReplayMatch:
    """For GPU rows replayed from CUDA graphs: the op whose captured launch each one is, and its replay."""
    ops = np.full(rows.size, -1, dtype=np.int64)
    replays = np.full(rows.size, -1, dtype=np.int64)
    caps = captures(trace)
    stats = {"captures": len(caps), "replays": 0, "priced_replays": 0, "ambiguous_replays": 0,
             "partly_matched_replays": 0}
    by = launch_of(trace)[rows]
    graph = np.zeros(rows.size, dtype=bool)
    graph[by >= 0] = trace.name_table_mask(lambda n: _GRAPH_LAUNCH.match(n.strip()) is not None)[by[by >= 0]]
    launches = np.unique(by[graph])
    stats["replays"] = int(launches.size)
    if not caps or not launches.size:
        return ReplayMatch(ops, replays, stats)
    where = {int(r): i for i, r in enumerate(rows.tolist())}
    every = launch_of(trace)
    gpu = np.flatnonzero(np.isin(every, launches))
    gpu = gpu[np.lexsort((gpu, trace.ts[gpu], every[gpu]))]     # by replay, then in time order
    cuts = np.searchsorted(every[gpu], launches)
    memo: dict[tuple, tuple[Capture | None, int, bool]] = {}
    for n, launch in enumerate(launches.tolist()):
        mine = gpu[cuts[n]:cuts[n + 1] if n + 1 < launches.size else gpu.size]
        stream = trace.stream[mine]
        one_stream = np.cumprod(stream == stream[0]).astype(bool)
        names = np.where(trace.kind[mine] == KERNEL, trace.name[mine], -1)
        key = (tuple(trace.kind[mine].tolist()), tuple(names.tolist()), int(one_stream.sum()))
        t = float(trace.ts[launch])
        known = [c for c in caps if c.end <= t]
        memo_key = key + (len(known),)
        if memo_key not in memo:
            memo[memo_key] = _best(known, trace.kind[mine], names, int(one_stream.sum()))
        cap, agree, ambiguous = memo[memo_key]
        stats["ambiguous_replays"] += int(ambiguous)
        if cap is None or agree == 0:
            continue
        stats["priced_replays"] += 1
        stats["partly_matched_replays"] += int(agree < mine.size)
        for r, op in zip(mine[:agree].tolist(), cap.ops[:agree].tolist()):
            i = where.get(r)
            if i is not None and op >= 0:
                ops[i], replays[i] = op, n
    return ReplayMatch(ops, replays, stats)


def _agreement(cap: Capture, kinds: np.ndarray, names: np.ndarray, limit: int) -> int:
    """How many GPU ops of a replay, from the first, agree with the capture's launches."""
    n = min(limit, cap.launches.size)
    ok = (cap.kinds[:n] == kinds[:n]) & ((cap.names[:n] == -1) | (cap.names[:n] == names[:n]))
    bad = np.flatnonzero(~ok)
    return int(bad[0]) if bad.size else n


def _best(caps: list[Capture], kinds: np.ndarray, names: np.ndarray, limit: int) -> tuple[Capture | None, int, bool]:
    """The capture a replay ran, how many of its GPU ops agree, and whether captures of different work tie."""
    scored = []
    for i, c in enumerate(caps):
        agree = _agreement(c, kinds, names, limit)
        scored.append((agree == kinds.size == c.launches.size, agree, i))
    if not scored:
        return None, 0, False
    top = max(scored)
    tied = [caps[i] for whole, agree, i in scored if (whole, agree) == top[:2]]
    agree = top[1]
    work = {c.work[:agree].tobytes() for c in tied}
    if len(work) > 1:
        return None, 0, True
    return tied[-1], agree, False


def replay_note(stats: dict) -> str | None:
    """Why replayed kernels stayed unpriced, and how to record a trace that prices them; None when all were."""
    replays = stats.get("replays", 0)
    if not replays:
        return None
    if not stats.get("captures"):
        return (f"the trace holds their replays but not the capture of their graphs, so no op is tied to them; "
                f"{HOW_TO_RECORD}, or profile a run with CUDA graphs off and record_shapes=True")
    priced = stats.get("priced_replays", 0)
    parts = [f"{priced} of {replays} replay(s) matched to the {stats['captures']} capture(s) in the trace"]
    if stats.get("ambiguous_replays"):
        parts.append(f"{stats['ambiguous_replays']} could run any of several captures of different work (one graph "
                     "per shape) and stay unpriced")
    if stats.get("partly_matched_replays"):
        parts.append(f"{stats['partly_matched_replays']} agree with their capture only in part (the rest ran out of "
                     "capture order or differs by kind or name) and are priced up to there")
    return "; ".join(parts)
