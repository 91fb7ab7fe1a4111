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

from perflab.analysis.multigpu.collective_sizes import (  # collective_kind, message_bytes: this module's interface too
    bus_factor,
    collective_kind,  # noqa: F401
    message_bytes,  # noqa: F401
)
from perflab.analysis.multigpu.collective_build import build_table
from perflab.analysis.multigpu.collective_table import CollectiveTable, bandwidths, from_dicts, group_ids, in_order_sum
from perflab.analysis.idle.intervals import length, overlap_length
from perflab.analysis.work.kernels import TYPES, row_types
from perflab.analysis.steps.links import gpu_rows
from perflab.analysis.idle.overlap import overlaps
from perflab.analysis.steps.windows import (
    Windows,
    analysis_windows,
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
    """One dict per communication kernel of the trace: kind, bytes, group size, times, bandwidths (the
    columns of `collective_table` as dicts: for callers that read a few)."""
    return trace.cached("collectives", lambda: collective_table(trace).dicts())


def collective_table(trace) -> CollectiveTable:
    """The collectives of a trace as columns (a rank summary's: from its dicts)."""
    if not isinstance(trace, Trace):
        return from_dicts(trace.cached("collectives"))
    return trace.cached("collective_table", lambda: build_table(trace, comm_rows(trace), _records(trace)))


# -- across ranks ------------------------------------------------------------------------------------------
def matched_by_order(c: dict) -> bool:
    """Whether the k-th such call of its process group in its step is the same call on every rank (a P2P
    transfer joins two ranks, not the group's k-th collective)."""
    return c["kind"] != "send_recv"


def _bandwidths(colls: list[dict], time_key: str, prefix: str = "") -> None:
    """Sets prefix + algbw/busbw on collectives()'s dicts from their bytes and `time_key`."""
    for c in colls:
        t = c.get(time_key)
        factor = bus_factor(c["kind"], c["group_size"])
        alg = c["bytes"] / (t * 1e3) if c["bytes"] is not None and t else None  # bytes/ns = GB/s
        c[prefix + "algbw_gbps"] = alg
        c[prefix + "busbw_gbps"] = alg * factor if alg is not None and factor is not None else None


def _order_keys(table: CollectiveTable) -> list:
    """Per collective, its (process group, step, k-th in them) key, None for one not matched by order."""
    counters: dict = defaultdict(int)
    p2p = table.is_kind("send_recv").tolist()
    pgs = [table.strings[p] if p >= 0 else "default" for p in table.pg.tolist()]
    out = []
    for pg, step, ok, skip in zip(pgs, table.step.tolist(), table.in_step.tolist(), p2p):
        if skip:
            out.append(None)
            continue
        group = (pg, step if ok else None)
        out.append((*group, counters[group]))
        counters[group] += 1
    return out


def match_across_ranks(traces: list[Trace]) -> list[dict]:
    """The same collective on every rank that recorded it: per-rank kernel time, transfer time, waits.

    Sets `transfer_us` and `wait_us` of each rank's collectives (collective_table, and collectives' dicts)."""
    groups: dict[tuple, dict[int, tuple]] = defaultdict(dict)
    if len({t.rank for t in traces}) < 2:  # one rank: nothing to match
        return []
    for t in traces:
        table = collective_table(t)
        for i, (key, dur) in enumerate(zip(_order_keys(table), table.dur_us.tolist())):
            if key is not None:
                groups[key][t.rank] = (t, i, dur)
    matched = []
    for key, per_rank in groups.items():
        if len(per_rank) < 2:
            continue
        durs = {r: d for r, (_, _, d) in per_rank.items()}
        last = min(durs, key=durs.get)  # the last rank to arrive has the shortest kernel
        transfer = durs[last]
        for r, (t, i, d) in per_rank.items():
            table = collective_table(t)
            table.transfer_us[i], table.wait_us[i] = transfer, d - transfer
            if "collectives" in t.cache:
                t.cache["collectives"][i].update(transfer_us=transfer, wait_us=d - transfer)
        first_t, first_i, _ = per_rank[last]
        first = collective_table(first_t)
        matched.append({"key": key, "kind": first.strings[first.kind[first_i]], "bytes": _value(first.bytes[first_i]),
                        "group_size": int(first.group_size[first_i]), "transfer_us": transfer, "last_rank": last,
                        "ranks": sorted(per_rank), "wait_us": {r: durs[r] - transfer for r in sorted(per_rank)}})
    return matched


def _value(x: float) -> float | None:
    return None if x != x else float(x)


def transfer_bandwidths(trace: Trace) -> None:
    """Sets transfer_algbw/busbw_gbps of the trace's collectives from their transfer times (NaN: not matched)."""
    table = collective_table(trace)
    table.transfer_algbw_gbps, table.transfer_busbw_gbps = bandwidths(table.bytes, table.transfer_us, table.factors())
    if "collectives" in trace.cache:
        for c, b in zip(trace.cache["collectives"], table.dicts()):
            c.update(transfer_algbw_gbps=b["transfer_algbw_gbps"], transfer_busbw_gbps=b["transfer_busbw_gbps"])


def _by_kind(table: CollectiveTable, keep: np.ndarray, time_key: str) -> dict:
    """Per kind (in the order they first come): count, time, bytes and bandwidths of the collectives `keep`."""
    idx = np.flatnonzero(keep)
    kinds, first = np.unique(table.kind[idx], return_index=True)
    t = table.dur_us[idx]
    if time_key == "transfer_us":
        t = np.where(table.transfer_us[idx] == table.transfer_us[idx], table.transfer_us[idx], t)
    nbytes = table.bytes[idx]
    sized = nbytes == nbytes
    out: dict[str, dict] = {}
    for k, f in sorted(zip(kinds.tolist(), first.tolist()), key=lambda p: p[1]):
        mine = table.kind[idx] == k
        d = {"count": int(mine.sum()), "time_us": in_order_sum(t[mine]), "bytes": in_order_sum(nbytes[mine & sized]),
             "sized": int((mine & sized).sum()), "sized_time_us": in_order_sum(t[mine & sized]),
             "group_size": int(table.group_size[idx[f]])}
        kind = table.strings[k]
        alg = d["bytes"] / (d["sized_time_us"] * 1e3) if d["sized_time_us"] > 0 and d["sized"] else None
        factor = bus_factor(kind, d["group_size"])
        d["algbw_gbps"] = alg
        d["busbw_gbps"] = alg * factor if alg is not None and factor is not None else None
        out[kind] = d
    return out


def window_mask(table: CollectiveTable, windows: Windows) -> np.ndarray:
    """Whether each collective's kernel starts inside one of the windows."""
    return windows.contains(table.ts) if len(table) else np.zeros(0, dtype=bool)


def rank_summary(trace: Trace, windows: Windows) -> dict:
    """One rank: step time, communication time, overlap, exposed communication, waiting, per step."""
    ov = overlaps(trace, windows)
    table = collective_table(trace)
    inside = window_mask(table, windows)
    count = int(inside.sum())
    wait = table.wait_us[inside]
    matched = wait == wait
    st = step_times(trace)
    wait_exposed = p2p_exposed = 0.0
    if count:  # the waiting part of each kernel is its start; count the part compute does not hide
        starts = trace.ts[table.row[inside]]
        comp = compute_spans(trace, windows)
        wait_end = starts + np.where(matched, wait, 0.0)
        wait_exposed = length(starts, wait_end) - overlap_length((starts, wait_end), comp) if matched.any() else 0.0
        p2p_end = starts + p2p_waits(table, inside)  # a receive spins until its peer sends: waiting, not transfer
        p2p_exposed = length(starts, p2p_end) - overlap_length((starts, p2p_end), comp)
    step_ms = float(np.median(st)) / 1e3 if st.size else windows.total / 1e3
    return rank_row(trace.rank, len(windows.steps), windows.total, ov, step_ms, count,
                    sum(wait[matched].tolist()) if matched.any() else None, wait_exposed, p2p_exposed)


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


def p2p_waits(table: CollectiveTable, keep: np.ndarray | None = None) -> np.ndarray:
    """Per collective (of `keep`): for a P2P transfer, its kernel time beyond the fastest one of the same name
    and size among them (the time it spun waiting for its peer); 0 for every other kind."""
    idx = np.flatnonzero(keep) if keep is not None else np.arange(len(table))
    p2p = table.is_kind("send_recv")[idx]
    dur = table.dur_us[idx]
    out = np.zeros(idx.size)
    if p2p.any():
        nbytes = table.bytes[idx]
        group, _ = group_ids(table.name[idx], nbytes)
        fastest = np.full(idx.size, np.inf)
        np.minimum.at(fastest, group[p2p], dur[p2p])
        out[p2p] = dur[p2p] - fastest[group[p2p]]
    return out


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
    tables = [collective_table(t) for t in traces]
    for t in traces:
        transfer_bandwidths(t)
    last_counts: dict[int, int] = defaultdict(int)
    for m in matched:
        if max(m["wait_us"].values()) > 0:
            last_counts[m["last_rank"]] += 1
    return job_summary(traces, per_rank, tables[0], sum(len(t) for t in tables),
                       sum(int((t.bytes == t.bytes).sum()) for t in tables), len(matched), dict(last_counts))


def job_summary(ranks: list, per_rank: list[dict], first_rank_collectives: CollectiveTable, count: int, sized: int,
                matched: int, last_counts: dict[int, int]) -> dict:
    """The across-rank summary from its parts; `ranks`: objects with `rank` and `meta` (traces or their
    summaries), in rank order; last_counts: per rank, how many matched collectives it arrived at last (in the
    order the ranks first did)."""
    ref = first_rank_collectives
    # a kernel launched before the first profiled step (often a long wait) is no sample
    keep = ref.in_step if ref.in_step.any() else np.ones(len(ref), dtype=bool)
    steps = [r["step_ms"] for r in per_rank]
    spread = (max(steps) - min(steps)) / float(np.median(steps)) * 100.0 if len(steps) > 1 and np.median(steps) else 0.0
    waits = {r["rank"]: r["wait_ms"] for r in per_rank if r["wait_ms"] is not None}
    straggler = max(last_counts, key=last_counts.get) if last_counts else None
    return {
        "ranks": [t.rank for t in ranks],
        "world_size": max(int(t.meta.get("world_size") or 1) for t in ranks),
        "per_rank": per_rank,
        "collectives": {"count": count, "matched_across_ranks": matched, "sized": sized,
                        "by_kind": _by_kind(ref, keep, "transfer_us" if matched else "dur_us")},
        "step_ms_spread_pct": spread,
        "wait_ms_per_step": waits,
        "straggler": straggler,
        "last_to_arrive_counts": dict(last_counts),
    }


def top_collectives(trace: Trace, limit: int = 5) -> list[dict]:
    keep = ("name", "kind", "bytes", "group_size", "dur_us", "transfer_us", "wait_us", "algbw_gbps", "busbw_gbps",
            "transfer_busbw_gbps", "step")
    table = collective_table(trace)
    colls = table.dicts(np.argsort(-table.dur_us, kind="stable")[:limit])
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
