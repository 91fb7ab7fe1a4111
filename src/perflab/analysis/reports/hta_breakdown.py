"""Holistic Trace Analysis (HTA 0.5.0) temporal and idle-time breakdowns, same definitions.

What HTA does before either breakdown, reproduced here:
- keep events that have a duration and a category, minus the `Trace` span;
- when any timestamp is fractional (ns-resolution traces), round every event inward:
  ts = ceil(ts), end = floor(ts + dur);
- when the traces (all ranks together) name two or more distinct `ProfilerStep*` symbols, keep only
  CPU events that start before the last ProfilerStep starts, and GPU events whose correlation id
  matches a kept CPU event (one copy per match, as pandas' inner merge does);
- a "GPU kernel" is any event with an integer `stream` arg >= 0 (kernels, memcpy, memset, and
  CUDA sync records that carry a stream).

Temporal breakdown (per rank): over the span from the first to the last GPU event, idle = span minus
the union of GPU events, compute = union of compute kernels (not NCCL, Memcpy, Memset or *Sync),
non-compute = the rest.

Idle-time breakdown (one rank, HTA's default is rank 0; per stream): each gap between consecutive
kernels/memcpys/memsets on a stream is `host wait` if the next one's CPU launch started after the
previous one ended, else `kernel wait` if the gap is below consecutive_kernel_delay (30 µs), else
`other`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from perflab.analysis.steps.links import match
from perflab.trace.model import Trace, distinct

CONSECUTIVE_KERNEL_DELAY_US = 30
_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
_KERNEL_CATS = ("kernel", "Kernel", "gpu_memset", "Memset", "gpu_memcpy", "Memcpy", "mtia_ccp_events")
_DEVICE_SYNC_NAMES = ("Event Sync", "Context Sync")
IDLE_CATEGORIES = ("host_wait", "kernel_wait", "other")


@dataclass
class HtaRank:
    """One rank's events as HTA sees them after loading."""

    trace: Trace
    rows: np.ndarray          # our row ids of the kept events (each GPU row repeated per match)
    ts: np.ndarray            # HTA-rounded times of those rows
    end: np.ndarray
    runtime_ts: np.ndarray    # for GPU rows: ts of the correlated CPU event (NaN if none)


def _rounded_times(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    if not trace.meta.get("ts_is_float"):
        return trace.ts, trace.ts + trace.dur
    return np.ceil(trace.ts), np.floor(trace.ts + trace.dur)


def _base_rows(trace: Trace) -> np.ndarray:
    cat_ok = np.array([c not in ("", "Trace") for c in trace.cats], dtype=bool)
    return cat_ok[trace.cat] if trace.cats else np.zeros(len(trace), dtype=bool)


def _gpu_filter(trace: Trace) -> np.ndarray:
    device_sync = trace.name_table_mask(lambda n: n in _DEVICE_SYNC_NAMES)
    return ((trace.stream >= 0) & (trace.correlation >= 0)) | device_sync


def step_symbols(traces: list[Trace]) -> set[str]:
    """The distinct ProfilerStep* names and categories of `traces` (HTA filters steps when there are two)."""
    symbols: set[str] = set()
    for t in traces:
        used = distinct(t.name[_base_rows(t)])
        symbols.update(t.names[i] for i in used if "ProfilerStep" in t.names[i])
        symbols.update(c for c in t.cats if "ProfilerStep" in c)
    return symbols


def _runtime_rows(trace: Trace, base: np.ndarray, gpu: np.ndarray) -> np.ndarray:
    """For each row, the row of the CPU event with the same correlation (the last one in file order).

    -1 when there is none; rows with a correlation but no match point at the file's first event,
    as HTA's `index_correlation = 0` fallback does.
    """
    out = np.full(len(trace), -1, dtype=np.int64)
    has_corr = base & (trace.correlation != -1)
    cpu_rows = np.flatnonzero(has_corr & ~gpu)
    gpu_rows = np.flatnonzero(has_corr & gpu)
    first = trace.meta.get("first_event_row")
    unmatched = -1 if first is None else int(first)
    out[gpu_rows] = np.where(trace.correlation[gpu_rows] >= 0, unmatched, -1)
    found = match(trace.correlation[cpu_rows], cpu_rows, trace.correlation[gpu_rows], last=True)
    out[gpu_rows[found >= 0]] = found[found >= 0]
    return out


def hta_view(traces: list[Trace], filter_steps: bool | None = None) -> list[HtaRank]:
    """`filter_steps`: whether the last ProfilerStep is dropped; None: as HTA decides over `traces` (a
    caller that reads one rank of a job at a time decides it from the symbols of every rank, step_symbols)."""
    key = "hta_view:" + ",".join(str(id(t)) for t in traces) + f":{filter_steps}"
    return traces[0].cached(key, lambda: _hta_view(traces, filter_steps))


def _hta_view(traces: list[Trace], filter_steps: bool | None) -> list[HtaRank]:
    if filter_steps is None:
        filter_steps = len(step_symbols(traces)) >= 2
    times = [_rounded_times(t) for t in traces]
    origin = min((float(ts.min()) for ts, _ in times if ts.size), default=0.0)  # HTA aligns ranks at 0
    out = []
    for trace, (ts, end) in zip(traces, times):
        ts, end = ts - origin, end - origin
        base = _base_rows(trace)
        gpu = _gpu_filter(trace)
        runtime = _runtime_rows(trace, base, gpu)
        if filter_steps:
            rows = _rows_in_complete_steps(trace, base, gpu, ts)
        else:
            rows = np.flatnonzero(base)
        kept = np.zeros(len(trace), dtype=bool)
        kept[rows] = True
        rt = runtime[rows]
        rt_ok = (rt >= 0) & kept[np.maximum(rt, 0)]
        runtime_ts = np.where(rt_ok, ts[np.maximum(rt, 0)], np.nan)
        out.append(HtaRank(trace, rows, ts[rows], end[rows], runtime_ts))
    return out


def _rows_in_complete_steps(trace: Trace, base: np.ndarray, gpu: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """HTA's _filter_irrelevant_gpu_kernels: drop the last profiler step (and what follows)."""
    cpu = base & ~gpu
    is_step = trace.name_table_mask(lambda n: "ProfilerStep" in n)
    step_starts = ts[cpu & is_step]
    if step_starts.size == 0:
        return np.zeros(0, dtype=np.int64)
    cpu_kept = np.flatnonzero(cpu & (ts < step_starts.max()))
    gpu_rows = np.flatnonzero(base & gpu)
    corr_kept = np.sort(trace.correlation[cpu_kept])
    lo = np.searchsorted(corr_kept, trace.correlation[gpu_rows], side="left")
    hi = np.searchsorted(corr_kept, trace.correlation[gpu_rows], side="right")
    copies = hi - lo
    gpu_kept = np.repeat(gpu_rows, copies)
    return np.concatenate((gpu_kept, cpu_kept))


def _hta_merge(ts: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """HTA's merge_kernel_intervals: a group starts where ts exceeds every earlier end."""
    if ts.size == 0:
        return ts, end
    order = np.argsort(ts, kind="stable")
    s, e = ts[order], end[order]
    prev_reach = np.maximum.accumulate(e)[:-1]
    new_group = np.concatenate(([True], s[1:] > prev_reach))
    group = np.cumsum(new_group) - 1
    n_groups = int(group[-1]) + 1
    g_start = s[new_group]
    g_end = np.full(n_groups, -np.inf)
    np.maximum.at(g_end, group, e)
    return g_start, g_end


def _compute_mask(trace: Trace, rows: np.ndarray) -> np.ndarray:
    table = np.array([not _NOT_COMPUTE.match(n) for n in trace.names], dtype=bool)
    return table[trace.name[rows]] if trace.names else np.zeros(rows.size, dtype=bool)


def temporal_breakdown(traces: Trace | list[Trace], filter_steps: bool | None = None) -> list[dict]:
    """Per rank: idle / compute / non-compute time over the GPU span (HTA get_temporal_breakdown)."""
    traces = [traces] if isinstance(traces, Trace) else list(traces)
    results = []
    for view in hta_view(traces, filter_steps):
        t = view.trace
        on_gpu = t.stream[view.rows] != -1
        if not on_gpu.any():
            results.append({"rank": t.rank, "error": "no GPU events: HTA fails here (empty kernel list)"})
            continue
        s, e = _hta_merge(view.ts[on_gpu], view.end[on_gpu])
        kernel_time = float(e[-1] - s[0])
        idle = kernel_time - float((e - s).sum())
        comp = on_gpu & _compute_mask(t, view.rows)
        cs, ce = _hta_merge(view.ts[comp], view.end[comp])
        compute = float((ce - cs).sum())
        non_compute = kernel_time - compute - idle
        results.append({
            "rank": t.rank, "idle_us": idle, "compute_us": compute, "non_compute_us": non_compute,
            "kernel_us": kernel_time, **_percentages(kernel_time, idle=idle, compute=compute,
                                                       non_compute=non_compute),
        })
    return results


def _percentages(total: float, **parts: float) -> dict:
    return {f"{k}_pct": (round(100.0 * v / total, 2) if total else 0.0) for k, v in parts.items()}


def idle_time_breakdown(traces: Trace | list[Trace], rank: int | None = None,
                        consecutive_kernel_delay: float = CONSECUTIVE_KERNEL_DELAY_US,
                        filter_steps: bool | None = None) -> dict:
    """HTA get_idle_time_breakdown for one rank: per stream, idle time by category.

    HTA only looks at rank 0 and fails when there is none; rank=None picks rank 0 when present,
    else the lowest rank (and says so).
    """
    traces = [traces] if isinstance(traces, Trace) else list(traces)
    views = {v.trace.rank: v for v in hta_view(traces, filter_steps)}
    chosen = rank if rank is not None else (0 if 0 in views else min(views))
    if chosen not in views:
        return {"rank": chosen, "error": f"no trace for rank {chosen}", "streams": []}
    note = "" if chosen == 0 else "HTA analyses rank 0 by default and fails without it"
    view = views[chosen]
    t = view.trace
    kernel_cat = np.array([c in _KERNEL_CATS for c in t.cats], dtype=bool)
    sel = (t.stream[view.rows] != -1) & kernel_cat[t.cat[view.rows]]
    streams_out = []
    rows = view.rows[sel]
    ts, end, rts = view.ts[sel], view.end[sel], view.runtime_ts[sel]
    stream = t.stream[rows]
    _, first_seen = np.unique(stream, return_index=True)
    for sid in stream[np.sort(first_seen)]:
        on = np.flatnonzero(stream == sid)
        on = on[np.argsort(ts[on], kind="stable")]
        s, e, r = ts[on], end[on], rts[on]
        prev_end = np.concatenate(([np.nan], e[:-1]))
        gap = s - prev_end
        with np.errstate(invalid="ignore"):
            host = r > prev_end
            kernel = ~host & (gap < consecutive_kernel_delay)
        other = ~host & ~kernel
        cats = {"host_wait": host, "kernel_wait": kernel, "other": other}
        present = {k: float(np.nansum(gap[m])) for k, m in cats.items() if m.any()}
        total = sum(present.values())
        for k, v in present.items():
            streams_out.append({"stream": int(sid), "category": k, "idle_us": v,
                                "ratio": (v / total) if total else float("nan")})
    if not streams_out:
        return {"rank": chosen, "error": "no GPU kernels, memcpys or memsets: HTA fails here", "streams": []}
    return {"rank": chosen, "note": note, "consecutive_kernel_delay_us": consecutive_kernel_delay,
            "streams": streams_out, **_idle_totals(streams_out)}


def _idle_totals(rows: list[dict]) -> dict:
    totals = {k: 0.0 for k in IDLE_CATEGORIES}
    for r in rows:
        totals[r["category"]] += r["idle_us"]
    all_idle = sum(totals.values())
    return {"idle_us": totals, "idle_pct": {k: (100.0 * v / all_idle if all_idle else 0.0) for k, v in totals.items()}}
