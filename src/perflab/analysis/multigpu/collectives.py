"""Collectives across ranks: what each NCCL kernel moved, how fast, how much of it is exposed, who waits.

Per rank: every communication kernel becomes a collective (type, bytes, group size) with its
algorithm bandwidth (bytes / time) and bus bandwidth, the nccl-tests convention
(github.com/NVIDIA/nccl-tests, doc/PERFORMANCE.md) that makes numbers comparable across rank counts:

    all_reduce                                  busbw = algbw * 2(n-1)/n
    all_gather, reduce_scatter, all_to_all      busbw = algbw * (n-1)/n     (bytes: the full buffer)
    broadcast, reduce, send/recv                busbw = algbw

Across ranks: the k-th collective of a process group inside ProfilerStep#s on every rank is the same
collective. An NCCL kernel starts when its rank arrives and ends when the data has moved, which
needs every rank; so the last rank to arrive has the shortest kernel, and that duration is the
transfer time. Every other rank's extra kernel time is waiting for the late rank. This needs no
clock alignment between hosts. Time a rank spends waiting is load imbalance (`load-imbalance`), not
communication cost; exposed communication minus that wait is what overlapping could hide
(`comm-not-overlapped`).
"""
from __future__ import annotations

import re
from collections import defaultdict

import numpy as np

from perflab.analysis.multigpu.collective_sizes import (  # collective_kind: part of this module's interface too
    bus_factor,
    collective_kind,  # noqa: F401
    collective_kind_cached,
    kernel_collective_kind,
    message_bytes,
)
from perflab.analysis.idle.intervals import length, overlap_length
from perflab.analysis.work.kernels import TYPES, row_types
from perflab.analysis.steps.links import gpu_rows, launch_of
from perflab.analysis.idle.overlap import overlaps
from perflab.analysis.steps.windows import (
    Windows,
    analysis_windows,
    profiler_steps,
    step_times,
)
from perflab.trace.model import KERNEL, Trace


def comm_rows(trace: Trace) -> np.ndarray:
    """GPU rows of communication kernels, by start time."""
    def compute() -> np.ndarray:
        rows = gpu_rows(trace)
        rows = rows[(trace.kind[rows] == KERNEL) & (row_types(trace, rows) == TYPES.index("communication"))]
        return rows[np.argsort(trace.ts[rows], kind="stable")]
    return trace.cached("comm_rows", compute)


def _records(trace: Trace) -> list:
    from perflab.trace.torch_profiler.comm_args import read_comm_records

    path = trace.meta.get("path")
    if not path or comm_rows(trace).size == 0:
        return []
    return trace.cached("comm_records", lambda: read_comm_records(path))


def collectives(trace: Trace) -> list[dict]:
    """One dict per communication kernel of the trace: kind, bytes, group size, times, bandwidths."""
    return trace.cached("collectives", lambda: _collectives(trace))


def _collectives(trace: Trace) -> list[dict]:
    rows = comm_rows(trace)
    if rows.size == 0:
        return []
    recs = _records(trace)
    by_corr = {r.correlation: r for r in recs if r.source == "kernel" and r.correlation >= 0}
    host = sorted((r for r in recs if r.source != "kernel"), key=lambda r: (r.ts, r.source != "record_param_comms"))
    host_ts = np.array([r.ts for r in host])
    longest = max((r.end - r.ts for r in host), default=0.0)
    launches = launch_of(trace)[rows]
    world = int(trace.meta.get("world_size") or 1)
    steps = profiler_steps(trace)
    when = np.where(launches >= 0, trace.ts[np.maximum(launches, 0)], trace.ts[rows])
    at = np.searchsorted(steps.start, when, side="right") - 1 if len(steps) else np.full(rows.size, -1)
    within = ((at >= 0) & (when < steps.end[np.maximum(at, 0)])).tolist() if len(steps) else [False] * rows.size
    step_of = steps.number[np.maximum(at, 0)].tolist() if len(steps) else [None] * rows.size
    launch_ts = trace.ts[np.maximum(launches, 0)]
    # per kernel, the last host record that starts by its launch (where the search for one around it begins)
    last_before = (np.searchsorted(host_ts, launch_ts, side="right") - 1 if host else launches).tolist()
    host_starts = host_ts.tolist()
    out = []
    for row, corr, launch, t, i, name_id, stream, ts, dur, k, inside in zip(
            rows.tolist(), trace.correlation[rows].tolist(), launches.tolist(), launch_ts.tolist(), last_before,
            trace.name[rows].tolist(), trace.stream[rows].tolist(), trace.ts[rows].tolist(),
            trace.dur[rows].tolist(), step_of, within):
        rec = by_corr.get(corr)
        if rec is None and host and launch >= 0:
            rec = _enclosing(host, host_starts, t, i, longest)
        name = trace.names[name_id]
        kernel_kind = kernel_collective_kind(name)
        kind = collective_kind_cached(rec.collective) if rec else None
        if kind is None or (kernel_kind not in (None, "send_recv") and kind != kernel_kind):
            kind, rec = kernel_kind, (rec if kind is None else None)
        n = (rec.group_size if rec and rec.group_size else None) or world
        nbytes = message_bytes(kind, rec.in_nelems, rec.out_nelems, rec.dtype, n) if rec else None
        out.append({
            "row": row, "name": name, "kind": kind or "other", "stream": stream,
            "ts": ts, "dur_us": dur, "group_size": n,
            "pg": (rec.pg if rec and rec.pg else None), "bytes": nbytes, "dtype": rec.dtype if rec else None,
            "args_from": rec.source if rec else None, "step": int(k) if inside else None,
        })
    _bandwidths(out, "dur_us")
    return out


def _enclosing(host: list, host_starts: list, t: float, i: int, longest: float):
    """The host-side record (record_param_comms or nccl:* range) around a kernel's launch at t; `i`: the last
    record that starts by t.

    Only records that start within `longest` (the longest record) before the launch can enclose it."""
    best = None
    while i >= 0 and host_starts[i] >= t - longest:
        r = host[i]
        if r.ts <= t <= r.end and (best is None or (best.source != "record_param_comms" and
                                                    r.source == "record_param_comms")):
            best = r
            if r.source == "record_param_comms":
                break
        i -= 1
    return best


def _bandwidths(colls: list[dict], time_key: str, prefix: str = "") -> None:
    for c in colls:
        t = c.get(time_key)
        factor = bus_factor(c["kind"], c["group_size"])
        alg = c["bytes"] / (t * 1e3) if c["bytes"] is not None and t else None  # bytes/ns = GB/s
        c[prefix + "algbw_gbps"] = alg
        c[prefix + "busbw_gbps"] = alg * factor if alg is not None and factor is not None else None


# -- across ranks ------------------------------------------------------------------------------------------
def matched_by_order(c: dict) -> bool:
    """Whether the k-th such call of its process group in its step is the same call on every rank (a P2P
    transfer joins two ranks, not the group's k-th collective)."""
    return c["kind"] != "send_recv"


def _match_key(c: dict, counters: dict) -> tuple:
    group = (c["pg"] or "default", c["step"])
    k = counters[group]
    counters[group] += 1
    return (*group, k)


def match_across_ranks(traces: list[Trace]) -> list[dict]:
    """The same collective on every rank that recorded it: per-rank kernel time, transfer time, waits.

    Sets `transfer_us` and `wait_us` on each rank's collective dicts (the fields of `collectives`)."""
    groups: dict[tuple, dict[int, dict]] = defaultdict(dict)
    if len({t.rank for t in traces}) < 2:  # one rank: nothing to match
        return []
    for t in traces:
        counters: dict = defaultdict(int)
        for c in collectives(t):
            if matched_by_order(c):
                groups[_match_key(c, counters)][t.rank] = c
    matched = []
    for key, per_rank in groups.items():
        if len(per_rank) < 2:
            continue
        durs = {r: c["dur_us"] for r, c in per_rank.items()}
        last = min(durs, key=durs.get)  # the last rank to arrive has the shortest kernel
        transfer = durs[last]
        for r, c in per_rank.items():
            c["transfer_us"] = transfer
            c["wait_us"] = durs[r] - transfer
        first = per_rank[last]
        matched.append({"key": key, "kind": first["kind"], "bytes": first["bytes"], "group_size": first["group_size"],
                        "transfer_us": transfer, "last_rank": last, "ranks": sorted(per_rank),
                        "wait_us": {r: durs[r] - transfer for r in sorted(per_rank)}})
    return matched


def _by_kind(colls: list[dict], time_key: str) -> dict:
    out: dict[str, dict] = {}
    for c in colls:
        d = out.setdefault(c["kind"], {"count": 0, "time_us": 0.0, "bytes": 0.0, "sized": 0, "sized_time_us": 0.0,
                                       "group_size": c["group_size"]})
        d["count"] += 1
        t = c.get(time_key) if c.get(time_key) is not None else c["dur_us"]
        d["time_us"] += t
        if c["bytes"] is not None:
            d["sized"] += 1
            d["bytes"] += c["bytes"]
            d["sized_time_us"] += t
    for kind, d in out.items():
        alg = d["bytes"] / (d["sized_time_us"] * 1e3) if d["sized_time_us"] > 0 and d["sized"] else None
        factor = bus_factor(kind, d["group_size"])
        d["algbw_gbps"] = alg
        d["busbw_gbps"] = alg * factor if alg is not None and factor is not None else None
    return out


def in_windows(colls: list[dict], windows: Windows) -> list[dict]:
    """The collectives (dicts of `collectives`) whose kernel starts inside one of the windows."""
    if not colls:
        return []
    ts = np.array([c["ts"] for c in colls])
    inside = windows.contains(ts)
    return [c for c, ok in zip(colls, inside) if ok]


def rank_summary(trace: Trace, windows: Windows) -> dict:
    """One rank: step time, communication time, overlap, exposed communication, waiting, per step."""
    ov = overlaps(trace, windows)
    colls = in_windows(collectives(trace), windows)
    waits = [c["wait_us"] for c in colls if c.get("wait_us") is not None]
    st = step_times(trace)
    rows = np.array([c["row"] for c in colls], dtype=np.int64)
    wait_exposed = p2p_exposed = 0.0
    if waits or colls:  # the waiting part of each kernel is its start; count the part compute does not hide
        starts = trace.ts[rows]
        comp = compute_spans(trace, windows)
        wait_end = starts + np.array([c.get("wait_us") or 0.0 for c in colls])
        wait_exposed = length(starts, wait_end) - overlap_length((starts, wait_end), comp) if waits else 0.0
        p2p_end = starts + p2p_waits(colls)  # a receive spins until its peer sends: waiting, not transfer
        p2p_exposed = length(starts, p2p_end) - overlap_length((starts, p2p_end), comp)
    step_ms = float(np.median(st)) / 1e3 if st.size else windows.total / 1e3
    return rank_row(trace.rank, len(windows.steps), windows.total, ov, step_ms, len(colls),
                    sum(waits) if waits else None, wait_exposed, p2p_exposed)


def rank_row(rank: int, steps: int, window_us: float, ov: dict, step_ms: float, n_collectives: int,
             wait_us: float | None, wait_exposed_us: float, p2p_exposed_us: float = 0.0) -> dict:
    """A rank's line of the per-rank table from its numbers (wait_us: None when no collective was matched)."""
    per = 1.0 / max(steps, 1) / 1e3
    comm = ov["comm"]
    return {
        "rank": rank, "steps": steps, "step_ms": step_ms,
        "compute_ms": ov["compute_us"] * per, "comm_ms": comm["time_us"] * per,
        "comm_overlap_pct": comm["overlap_pct"], "exposed_comm_ms": comm["exposed_us"] * per,
        "wait_ms": (wait_us * per) if wait_us is not None else None,
        "exposed_wait_ms": wait_exposed_us * per if wait_us is not None else None,
        "exposed_transfer_ms": max(comm["exposed_us"] - wait_exposed_us - p2p_exposed_us, 0.0) * per,
        "exposed_p2p_wait_ms": p2p_exposed_us * per,
        "collectives_per_step": n_collectives / max(steps, 1),
        "window_ms": window_us / 1e3,
    }


def p2p_waits(colls: list[dict]) -> np.ndarray:
    """Per collective: for a P2P transfer, its kernel time beyond the fastest one of the same name and size on
    this rank (the time it spun waiting for its peer); 0 for every other kind."""
    fastest: dict[tuple, float] = {}
    for c in colls:
        if c["kind"] == "send_recv":
            key = (c["name"], c["bytes"])
            fastest[key] = min(fastest.get(key, float("inf")), c["dur_us"])
    return np.array([c["dur_us"] - fastest[(c["name"], c["bytes"])] if c["kind"] == "send_recv" else 0.0
                     for c in colls], dtype=np.float64)


def compute_spans(trace: Trace, windows: Windows) -> tuple[np.ndarray, np.ndarray]:
    from perflab.analysis.work.kernels import window_gpu_rows

    rows = window_gpu_rows(trace, windows)
    types = row_types(trace, rows)
    comp = rows[~np.isin(types, [TYPES.index(t) for t in ("memcpy", "memset", "communication")])]
    return trace.ts[comp], trace.end[comp]


def multirank_summary(traces: list[Trace], step: int | None = None) -> dict:
    """Per-rank and across-rank communication evidence for a set of per-rank traces."""
    matched = match_across_ranks(traces)
    per_rank = [rank_summary(t, analysis_windows(t, step)) for t in traces]
    all_colls = [c for t in traces for c in collectives(t)]
    for t in traces:
        _bandwidths(collectives(t), "transfer_us", "transfer_")
    last_counts: dict[int, int] = defaultdict(int)
    for m in matched:
        if max(m["wait_us"].values()) > 0:
            last_counts[m["last_rank"]] += 1
    return job_summary(traces, per_rank, collectives(traces[0]), len(all_colls),
                       sum(c["bytes"] is not None for c in all_colls), len(matched), dict(last_counts))


def job_summary(ranks: list, per_rank: list[dict], first_rank_collectives: list[dict], count: int, sized: int,
                matched: int, last_counts: dict[int, int]) -> dict:
    """The across-rank summary from its parts; `ranks`: objects with `rank` and `meta` (traces or their
    summaries), in rank order; last_counts: per rank, how many matched collectives it arrived at last (in the
    order the ranks first did)."""
    ref = first_rank_collectives
    in_steps = [c for c in ref if c["step"] is not None]
    ref = in_steps or ref  # a kernel launched before the first profiled step (often a long wait) is no sample
    steps = [r["step_ms"] for r in per_rank]
    spread = (max(steps) - min(steps)) / float(np.median(steps)) * 100.0 if len(steps) > 1 and np.median(steps) else 0.0
    waits = {r["rank"]: r["wait_ms"] for r in per_rank if r["wait_ms"] is not None}
    straggler = max(last_counts, key=last_counts.get) if last_counts else None
    return {
        "ranks": [t.rank for t in ranks],
        "world_size": max(int(t.meta.get("world_size") or 1) for t in ranks),
        "per_rank": per_rank,
        "collectives": {"count": count, "matched_across_ranks": matched, "sized": sized,
                        "by_kind": _by_kind(ref, "transfer_us" if matched else "dur_us")},
        "step_ms_spread_pct": spread,
        "wait_ms_per_step": waits,
        "straggler": straggler,
        "last_to_arrive_counts": dict(last_counts),
    }


def top_collectives(trace: Trace, limit: int = 5) -> list[dict]:
    keep = ("name", "kind", "bytes", "group_size", "dur_us", "transfer_us", "wait_us", "algbw_gbps", "busbw_gbps",
            "transfer_busbw_gbps", "step")
    colls = sorted(collectives(trace), key=lambda c: -c["dur_us"])[:limit]
    return [{k: c.get(k) for k in keep} for c in colls]


_HTA_COMM = re.compile(r"^nccl.*Kernel")
_HTA_MEMORY = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_HTA_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")


def hta_comm_comp_overlap(traces: Trace | list[Trace]) -> list[dict]:
    """HTA's get_comm_comp_overlap, per rank: % of (merged) communication kernel time during which a
    (merged) computation kernel runs, over the events HTA keeps after loading (hta_breakdown.hta_view:
    the last ProfilerStep dropped, times rounded inward) with a stream; comm = ^nccl.*Kernel;
    computation = neither comm, memory nor *Sync (HTA 0.5.0's definitions)."""
    from perflab.analysis.reports.hta_breakdown import _hta_merge, hta_view

    traces = [traces] if isinstance(traces, Trace) else traces
    out = []
    for view in hta_view(traces):
        t = view.trace
        on_stream = t.stream[view.rows] >= 0
        names = t.name[view.rows]
        comm_table = np.array([_HTA_COMM.match(n) is not None for n in t.names], dtype=bool)
        comp_table = np.array([not _HTA_MEMORY.match(n) and not _HTA_NOT_COMPUTE.match(n) for n in t.names],
                              dtype=bool)
        comm = on_stream & comm_table[names]
        comp = on_stream & comp_table[names] & ~comm_table[names]
        a = _hta_merge(view.ts[comm], view.end[comm])
        b = _hta_merge(view.ts[comp], view.end[comp])
        total = float((a[1] - a[0]).sum())
        out.append({"rank": t.rank, "comm_us": total,
                    "overlap_pct": 100.0 * overlap_length(a, b) / total if total > 0 else 0.0})
    return out
