"""The collectives of a trace as columns (analysis/multigpu/collective_table.py), from its communication kernels
and the records that describe them (a kernel's own args, or the host-side record around its launch).

A kernel's kind is its record's, unless the kernel's name says another collective (a P2P kernel name says
nothing: its record decides); its size and group come from that record only.
"""
from __future__ import annotations

import numpy as np

from perflab.analysis.multigpu.collective_table import (
    CollectiveTable,
    bandwidths,
    factor_column,
    kinds_of_names,
    message_bytes_column,
    text_ids,
)
from perflab.analysis.steps.links import launch_of
from perflab.analysis.steps.windows import profiler_steps
from perflab.trace.model import Trace


def build_table(trace: Trace, rows: np.ndarray, recs: list) -> CollectiveTable:
    """The collectives of the communication kernels `rows` (by start time), with the records `recs` of the trace."""
    strings: list = ["other"]
    launches = launch_of(trace)[rows]
    rec = _kernel_records(trace, rows, recs, launches)
    col = _record_columns(recs, strings)
    kernel_kind = kinds_of_names(trace.names, trace.name[rows], strings, kernel=True)
    has = rec >= 0
    at = np.maximum(rec, 0)
    rec_kind = np.where(has, col["kind"][at] if recs else -1, -1)
    # the recorded kind, unless the kernel's own name says another collective (not a P2P): then the kernel's
    replace = (rec_kind < 0) | ((kernel_kind >= 0) & (kernel_kind != _id(strings, "send_recv")) & (rec_kind != kernel_kind))
    kind = np.where(replace, kernel_kind, rec_kind)
    rec = np.where(replace & (rec_kind >= 0), -1, rec)
    has = rec >= 0
    at = np.maximum(rec, 0)
    world = int(trace.meta.get("world_size") or 1)
    pick = (lambda f, missing: np.where(has, col[f][at], missing)) if recs else (lambda f, missing: np.full(rows.size, missing))
    group = pick("group_size", 0)
    n = np.where(group > 0, group, world).astype(np.int64)
    nbytes = message_bytes_column(kind, strings, pick("in", np.nan), pick("out", np.nan), pick("dtype", -1),
                                  [strings[i] for i in range(len(strings))], n)
    nbytes = np.where(has, nbytes, np.nan)
    kind = np.where(kind >= 0, kind, 0)  # "other"
    steps = profiler_steps(trace)
    when = np.where(launches >= 0, trace.ts[np.maximum(launches, 0)], trace.ts[rows])
    if len(steps):
        k = steps.launched_in(when)
        within = k >= 0
        step = steps.number[np.maximum(k, 0)].astype(np.int64)
    else:
        within, step = np.zeros(rows.size, dtype=bool), np.full(rows.size, -1, dtype=np.int64)
    ts, dur = trace.ts[rows].astype(np.float64), trace.dur[rows].astype(np.float64)
    alg, bus = bandwidths(nbytes, dur, factor_column(kind, strings, n))
    none = np.full(rows.size, np.nan)
    return CollectiveTable(
        row=rows.astype(np.int64), name=trace.name[rows].astype(np.int64), names=trace.names, kind=kind.astype(np.int64),
        pg=pick("pg", -1).astype(np.int64), dtype=pick("dtype", -1).astype(np.int64),
        args_from=pick("source", -1).astype(np.int64), strings=strings, stream=trace.stream[rows].astype(np.int64),
        ts=ts, dur_us=dur, group_size=n, bytes=nbytes, step=step, in_step=within, algbw_gbps=alg, busbw_gbps=bus,
        transfer_us=none, wait_us=none.copy())


def _id(strings: list, s: str) -> int:
    return strings.index(s) if s in strings else -2


def _record_columns(recs: list, strings: list) -> dict:
    """The records' fields as columns (texts as ids into `strings`; pg "" as None)."""
    def num(values):
        return np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    names: list = []
    return {"kind": kinds_of_names(names, text_ids([r.collective or None for r in recs], names), strings, kernel=False),
            "group_size": np.array([r.group_size or 0 for r in recs], dtype=np.int64),
            "in": num([r.in_nelems for r in recs]), "out": num([r.out_nelems for r in recs]),
            "dtype": text_ids([r.dtype for r in recs], strings), "pg": text_ids([r.pg or None for r in recs], strings),
            "source": text_ids([r.source for r in recs], strings)}


def _kernel_records(trace: Trace, rows: np.ndarray, recs: list, launches: np.ndarray) -> np.ndarray:
    """Per kernel, the index in `recs` of its record: the kernel's own (by correlation) or the host record around
    its launch (_enclosing); -1 for none."""
    out = np.full(rows.size, -1, dtype=np.int64)
    if not recs:
        return out
    kernel = np.array([r.source == "kernel" and r.correlation >= 0 for r in recs], dtype=bool)
    corr = np.array([r.correlation for r in recs], dtype=np.int64)
    own = np.flatnonzero(kernel)
    if own.size:  # the last record of each correlation (a dict by correlation keeps it)
        order = own[np.argsort(corr[own], kind="stable")]
        last = order[np.append(corr[order][1:] != corr[order][:-1], True)]
        keys = corr[last]
        kc = trace.correlation[rows].astype(np.int64)
        at = np.minimum(np.searchsorted(keys, kc), keys.size - 1)
        out = np.where(keys[at] == kc, last[at], -1)
    hosted = np.flatnonzero(~kernel)
    if hosted.size == 0:
        return out
    ts = np.array([r.ts for r in recs], dtype=np.float64)
    end = np.array([r.end for r in recs], dtype=np.float64)
    rpc = np.array([r.source == "record_param_comms" for r in recs], dtype=bool)
    host = hosted[np.lexsort((~rpc[hosted], ts[hosted]))]  # by (ts, not record_param_comms), as sorted() would
    longest = max((r.end - r.ts for r in (recs[i] for i in hosted.tolist())), default=0.0)
    need = np.flatnonzero((out < 0) & (launches >= 0))
    t = trace.ts[launches[need]].astype(np.float64)
    found = _enclosing(ts[host], end[host], rpc[host], t, np.searchsorted(ts[host], t, side="right") - 1, longest)
    out[need] = np.where(found >= 0, host[np.maximum(found, 0)], -1)
    return out


def _enclosing(start: np.ndarray, end: np.ndarray, rpc: np.ndarray, t: np.ndarray, i: np.ndarray,
               longest: float) -> np.ndarray:
    """Per launch time t: the host record (record_param_comms or nccl:* range; index into the sorted records) around
    it, -1 for none; `i`: the last record that starts by t. The latest record_param_comms that encloses t, else the
    latest record that does; only records that start within `longest` (the longest record) before t can."""
    best, best_rpc = np.full(t.size, -1, dtype=np.int64), np.zeros(t.size, dtype=bool)
    lower = t - longest
    j, idx = i.copy(), np.arange(t.size)
    while idx.size:
        jj = np.maximum(j, 0)
        live = (j >= 0) & (start[jj] >= lower[idx])
        j, jj, idx = j[live], jj[live], idx[live]
        enc = (start[jj] <= t[idx]) & (t[idx] <= end[jj])
        take = enc & ((best[idx] < 0) | (~best_rpc[idx] & rpc[jj]))
        best[idx[take]], best_rpc[idx[take]] = jj[take], rpc[jj[take]]
        stop = enc & rpc[jj]  # a record_param_comms: the search ends there
        j, idx = j[~stop] - 1, idx[~stop]
    return best
