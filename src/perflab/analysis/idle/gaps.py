"""Why the GPU is idle: every idle gap inside the analysis windows gets a cause.

For each gap (no kernel, copy or memset running on the device) we look at what the host was doing:

- sync: the GPU ran out of work while the host was blocked in a synchronizing call. Had the host
  not waited, it could have prepared the next work during the wait, so the sync costs
  min(wait, gap) of the gap; the rest of the gap is classified like any other gap below. Until
  the GPU runs real work again, short host waits are part of the round trip (sync, not launch).
  When the host then visibly does work of its own (CPU ops that launch nothing, data loading,
  staging a copy), that work is the cause and the sync only costs the time the host stayed blocked.
  A sync that mostly waited for a copy is counted as a copy.
- copy: the host was inside a memcpy call (staging pageable memory, or a synchronous copy).
- input: the host was inside DataLoader iteration.
- launch: the next kernel was launched late but the host was busy launching (the gap is short,
  and the host was not in an op that launches nothing).
- host: the host was busy in CPU work that launches nothing (non-launching ops, or a long stretch
  with no launch at all).
- queued: the next kernel was already queued and the gap is only the device's own start-up
  latency between kernels (< 30 µs, HTA's "kernel wait"): a cost of tiny kernels, not of the host.
- other: queued work that still did not start (waiting on another stream, event or rank), or the
  host inside torch.profiler's own frames (prof.step(): the measurement, not the workload).
- host/launch also: the call that issues the next op started before the gap and was still running for
  most of it: the host is slow inside that call (a long one is host work, a short one launching).
- alloc: the host was inside device allocator calls (cudaMalloc, cudaFree, ...: analysis.gpu_memory.allocator), or the GPU
  ran dry inside a free and the gap is the host's short restart after it (a cudaFree drains the device first).
- other also: the part of a host or launch gap after the launch of the work that ends it returned, when that
  work started >= 1 ms after it (the host ran far ahead: the GPU was not waiting for the host then).
- wait: the host was blocked in a wait for something other than the GPU (a queue, a poll for requests,
  another process: analysis.idle.waits): the GPU had no work to do, the host did not compute.
"""
from __future__ import annotations

import numpy as np

from perflab.analysis.gpu_memory.allocator import allocator_time, drained_by_free
from perflab.analysis.idle.gap_examples import copy_idle_by_direction, examples
from perflab.analysis.idle.gap_model import (ALLOC, CAUSES, COPY, HOST, INPUT, LAUNCH, OTHER, QUEUED, SYNC, WAIT,
                                        GapAnalysis, merge_parts)
from perflab.analysis.idle.host import dataloader, host_work, memcpy_calls, profiler_bookkeeping
from perflab.analysis.idle.intervals import Coverage, merge
from perflab.analysis.steps.links import gpu_rows, launch_of, launch_rows, match
from perflab.analysis.idle.syncs import sync_rows
from perflab.analysis.idle.waits import waiting
from perflab.analysis.steps.windows import Windows, per_windows
from perflab.trace.model import KERNEL, MEMCPY, Trace, distinct

KERNEL_WAIT_US = 30.0       # HTA's consecutive_kernel_delay: below this a queued kernel's gap is launch latency
LAUNCH_GAP_MAX_US = 200.0   # launching one kernel never takes this long; a longer host wait is host work
SYNC_TOLERANCE_US = 2.0     # host and device clocks
HOST_OP_MIN_US = 50.0       # an op launching nothing for this long is work, not dispatch
LATENCY_US = 20.0           # a blocking call returns within this after the GPU ran dry, else it waits on more
MAJORITY = 0.5
SMALL_COPY_BYTES = 1 << 20  # copies this small between two syncs are the round trip itself
DEEP_QUEUE_US = 1000.0      # a GPU op starting this long after its launch returned was queued behind other work


def main_device(trace: Trace) -> int:
    rows = gpu_rows(trace)
    dev = trace.device[rows]
    if rows.size == 0 or (dev < 0).all():
        return -1
    ok = dev >= 0
    return int(np.bincount(dev[ok], weights=trace.dur[rows][ok]).argmax())


def device_rows(trace: Trace, device: int) -> np.ndarray:
    rows = gpu_rows(trace)
    if device < 0:
        return rows
    return rows[(trace.device[rows] == device) | (trace.device[rows] < 0)]


def _main_thread(trace: Trace) -> int:
    launches = launch_rows(trace)
    if launches.size == 0:
        return -1
    tids, counts = np.unique(trace.tid[launches], return_counts=True)
    return int(tids[counts.argmax()])


def _analyze_gaps(trace: Trace, windows: Windows, rows: np.ndarray | None = None) -> GapAnalysis:
    """`rows`: the device's GPU rows by start time (all of them unless a slice of a large trace is analysed)."""
    device = main_device(trace)
    if rows is None:
        rows = _sorted_device_rows(trace, device)
    wcov = Coverage(windows.start, windows.end)
    if rows.size == 0:
        return GapAnalysis(device, windows.total, 0.0, windows.total, {c: 0.0 for c in CAUSES},
                           {c: 0 for c in CAUSES})
    ts, end = trace.ts[rows], trace.end[rows]
    busy_s, busy_e = merge(ts, end)
    busy = Coverage(busy_s, busy_e)
    busy_us = float(wcov.covered(busy_s, busy_e).sum())

    lo, hi = min(windows.lo, float(busy_s[0])), max(windows.hi, float(busy_e[-1]))
    gs = np.concatenate(([lo], busy_e))
    ge = np.concatenate((busy_s, [hi]))
    keep = ge > gs
    gs, ge = gs[keep], ge[keep]
    inside = wcov.covered(gs, ge)
    keep = inside > 0
    gs, ge, inside = gs[keep], ge[keep], inside[keep]
    n = gs.size
    length = ge - gs

    nxt_i = np.searchsorted(ts, ge)
    nxt = np.where(nxt_i < rows.size, rows[np.minimum(nxt_i, rows.size - 1)], -1)
    launch = np.where(nxt >= 0, launch_of(trace)[np.maximum(nxt, 0)], -1)
    launch_ts = np.where(launch >= 0, trace.ts[np.maximum(launch, 0)], np.inf)

    copies = rows[trace.kind[rows] == MEMCPY]
    host_tid = np.where(launch >= 0, trace.tid[np.maximum(launch, 0)], _main_thread(trace))
    # unknown launch time: the gap cannot be blamed on a host wait
    known_launch = np.where((nxt >= 0) & (launch < 0), -np.inf, launch_ts)
    waited_copy_row = _last_copy_before(trace, copies, gs)
    blocking = _blocking_calls(trace, copies, busy, gs, ge, host_tid, known_launch, waited_copy_row)
    scale = np.where(length > 0, inside / np.maximum(length, 1e-9), 0.0)
    ext_wait = blocking["external"] * scale

    # -- the rest of each gap -------------------------------------------------------------
    cause = np.full(n, OTHER, dtype=np.int8)
    in_loader = dataloader(trace).covered(gs, ge) >= MAJORITY * length
    queued = (launch >= 0) & (launch_ts <= gs)
    host_wait = (launch >= 0) & (launch_ts > gs)
    cause[queued & (length < KERNEL_WAIT_US)] = QUEUED
    cause[host_wait] = LAUNCH
    cause[host_wait & (length > LAUNCH_GAP_MAX_US)] = HOST
    # The call that issues the next op began before the gap and was still running through most of it (a
    # first cudaMemset initializing the driver, a launch loading its module): the GPU waits for the host.
    launch_end = np.where(launch >= 0, trace.end[np.maximum(launch, 0)], -np.inf)
    in_call = ((launch >= 0) & (np.minimum(launch_end, ge) - np.maximum(launch_ts, gs) >= MAJORITY * length)
               & (length >= KERNEL_WAIT_US))
    host_tids = host_tid
    host_end = np.where(host_wait, launch_ts, ge)
    quiet = _quiet_host(trace, gs, host_end, host_tids)
    # A short wait for a launch filled with µs-long ops that launch nothing (views, reshapes, Python
    # glue between ops) is the eager dispatch path: launch overhead, unless a long op is among them.
    long_quiet = _quiet_host(trace, gs, host_end, host_tids, min_op_us=HOST_OP_MIN_US)
    quiet &= ~(host_wait & (length <= LAUNCH_GAP_MAX_US)) | long_quiet
    waiting_for_host = ~queued  # with work already queued, what the host does is beside the point
    cause[waiting_for_host & quiet] = HOST
    cause[waiting_for_host & _thread_share(gs, host_end, host_tids, lambda t: waiting(trace, t))] = WAIT
    cause[waiting_for_host & _thread_share(gs, host_end, host_tids, lambda t: allocator_time(trace, t))] = ALLOC
    cause[in_call] = np.where(length[in_call] > LAUNCH_GAP_MAX_US, HOST, LAUNCH)  # not a wait: the call is the work
    cause[waiting_for_host & (profiler_bookkeeping(trace).covered(gs, ge) >= MAJORITY * length)] = OTHER
    cause[waiting_for_host & in_loader] = INPUT
    call_copy, in_copy_call = _copy_in_call(trace, copies, gs, ge)
    in_copy_call &= waiting_for_host
    cause[in_copy_call & (call_copy != -2)] = COPY
    cause[in_copy_call & (call_copy == -2)] = OTHER  # blocked in a copy that waits on something else
    # After a drain the host has no lead: until it has restarted real GPU work, a short host wait
    # is the price of the round trip, not of launching; so is sending a small tensor back.
    episode = _sync_episodes(trace, rows, busy_s, gs, ge, blocking["call"] >= 0)
    cause[episode & (cause == LAUNCH)] = SYNC
    # So is the restart after a free that drained the GPU (cudaFree waits for the device to finish first).
    cause[waiting_for_host & (cause == LAUNCH) & drained_by_free(trace, gs, host_tids, known_launch)] = ALLOC
    small = (call_copy < 0) | (np.nan_to_num(trace.nbytes[np.maximum(call_copy, 0)], nan=0.0) <= SMALL_COPY_BYTES)
    cause[episode & (cause == COPY) & small] = SYNC
    # Host work we can see (CPU ops that launch nothing, loading data, staging a copy) is its own
    # cause; the sync then only costs the time the host stayed blocked. A long stretch with no
    # recorded host activity proves nothing of the kind: there the sync keeps min(drain, after).
    own_work = (np.isin(cause, (HOST, INPUT, COPY, ALLOC))) & waiting_for_host & (quiet | in_loader | in_copy_call
                                                                                  | (cause == ALLOC))
    sync_cost = (blocking["held"] + np.where(own_work, 0.0, blocking["overlap"])) * scale

    rest = np.maximum(inside - sync_cost - ext_wait, 0.0)
    # The host had already launched the work that ends the gap, milliseconds before the GPU started it: from
    # the end of that launch on, the GPU did not wait for the host (it ran work the trace does not show, or
    # waited on another stream or event); only the part before the launch can be the host's.
    behind = np.where((cause == HOST) | (cause == LAUNCH), np.clip(ge - np.maximum(launch_end, gs), 0.0, None), 0.0)
    behind = np.where(ge - launch_end >= DEEP_QUEUE_US, np.minimum(behind * scale, rest), 0.0)
    rest = rest - behind
    ext_wait = ext_wait + behind
    deep = behind > 0
    lead = ge[deep] - launch_end[deep]
    by_cause = {c: float(rest[cause == k].sum()) for k, c in enumerate(CAUSES)}
    counts = {c: int(np.count_nonzero((cause == k) & (rest > 0))) for k, c in enumerate(CAUSES)}
    on_copy = blocking["on_copy"]
    for name, mask in (("sync", ~on_copy), ("copy", on_copy)):
        by_cause[name] += float(sync_cost[mask].sum())
        counts[name] += int(np.count_nonzero(mask & (sync_cost > 0)))
    by_cause["other"] += float(ext_wait.sum())

    copy_idle = copy_idle_by_direction(
        trace,
        [(np.where(cause == COPY, rest, 0.0), np.where(call_copy >= 0, call_copy, waited_copy_row)),
         (np.where(on_copy, sync_cost, 0.0), np.where(blocking["copy_row"] >= 0, blocking["copy_row"],
                                                      waited_copy_row))])

    draining = (blocking["call"] >= 0) & ~on_copy & (sync_cost > 0)
    sync_info = {
        "draining_syncs": int(np.count_nonzero(draining)),
        "episode_idle_us": float(inside[episode].sum()),
        "wait_us": float(blocking["drain"][draining].sum()),
        "bubble_us": float(inside[draining].sum()),
        "cost_us": float(sync_cost[draining].sum()),
    }
    gaps = {"gs": gs, "ge": ge, "inside": inside, "cause": cause, "rest": rest, "nxt": nxt, "tid": host_tid,
            "sync_row": blocking["call"], "sync_part": sync_cost, "draining": draining}
    return GapAnalysis(
        device=device, window_us=windows.total, busy_us=busy_us, idle_us=float(inside.sum()),
        by_cause=by_cause, gap_count=counts, copy_idle=copy_idle, sync=sync_info,
        examples=examples(trace, gaps, CAUSES),
        behind={"us": float(behind.sum()), "gaps": int(deep.sum()), "lead_ms": float(np.median(lead)) / 1e3 if lead.size else 0.0},
        whole_gap={c: float((inside - ext_wait)[(cause == k) & (rest > 0)].sum()) for k, c in enumerate(CAUSES)},
    )


def _sync_episodes(trace: Trace, rows: np.ndarray, busy_s: np.ndarray, gs: np.ndarray, ge: np.ndarray,
                   drained: np.ndarray) -> np.ndarray:
    """Gaps from a drain until the GPU runs real work again.

    Tiny copies in between (a token id sent back, copied into a static input) belong to the round
    trip; the first kernel or large copy ends the episode.
    """
    n = gs.size
    if n == 0 or not drained.any():
        return np.zeros(n, dtype=bool)
    which = np.searchsorted(busy_s, trace.ts[rows], side="right") - 1
    bulky = (trace.kind[rows] == KERNEL) | (np.nan_to_num(trace.nbytes[rows], nan=0.0) > SMALL_COPY_BYTES)
    real = np.zeros(busy_s.size, dtype=bool)
    np.logical_or.at(real, which[which >= 0], bulky[which >= 0])
    ends_at = np.searchsorted(busy_s, ge)          # the busy interval that ends each gap
    starts_after = np.searchsorted(busy_s, gs) - 1  # the busy interval each gap follows
    continues = np.zeros(n, dtype=bool)
    continues[1:] = (starts_after[1:] == ends_at[:-1]) & ~real[np.clip(ends_at[:-1], 0, busy_s.size - 1)]
    segment = np.cumsum(~continues) - 1
    seen = np.cumsum(drained)
    first = np.flatnonzero(~continues)
    base = (seen - drained)[first][segment]
    return seen - base > 0


def _blocking_calls(trace: Trace, copies: np.ndarray, busy: Coverage, gs: np.ndarray, ge: np.ndarray,
                    tids: np.ndarray, next_launch: np.ndarray, last_copy: np.ndarray) -> dict:
    """Per gap: the host call (sync or memcpy) that was blocking when the GPU ran dry, and its cost.

    `next_launch` is when the work that ends the gap was launched (inf if unknown); `last_copy` the copy that
    ended last by each gap's start (_last_copy_before). Returns per gap
    `held` (the host still blocked after the GPU ran dry: return latency, or staging a pageable
    copy), `overlap` (min(drain, after)) and `external` (blocked on something else).

    A draining call waited `drain` = gs - start for the queued work; after it returned the GPU waited
    `after` = ge - return for the host to queue new work. Without the wait the host would have
    prepared that work meanwhile: cost = min(drain, after). If the call keeps blocking long after the
    GPU went idle, it waits on something else (another stream, device or rank): that part is external,
    unless it is the host side of a pageable copy whose DMA just finished (then it is copy time).
    """
    n = gs.size
    out = {"call": np.full(n, -1, dtype=np.int64), "held": np.zeros(n), "overlap": np.zeros(n), "external": np.zeros(n),
           "drain": np.zeros(n), "on_copy": np.zeros(n, dtype=bool), "copy_row": np.full(n, -1, dtype=np.int64)}
    memcpys = memcpy_calls(trace)
    calls = np.union1d(sync_rows(trace), memcpys[trace.dur[memcpys] >= LATENCY_US])
    if calls.size == 0 or n == 0:
        return out
    call = np.full(n, -1, dtype=np.int64)
    for tid in distinct(tids).tolist():  # only the thread that feeds the GPU matters
        mine = calls[trace.tid[calls] == tid]
        mine = mine[np.argsort(trace.ts[mine], kind="stable")]
        on = np.flatnonzero(tids == tid)
        if mine.size == 0:
            continue
        j = np.searchsorted(trace.ts[mine], gs[on] + SYNC_TOLERANCE_US, side="right") - 1
        c1 = trace.end[mine[np.maximum(j, 0)]]
        # The queue ran dry while the host was in the call, and the next work came only after it.
        hit = (j >= 0) & (c1 >= gs[on] - SYNC_TOLERANCE_US) & (next_launch[on] >= c1 - SYNC_TOLERANCE_US)
        call[on[hit]] = mine[j[hit]]
    at = np.flatnonzero(call >= 0)   # the rest keep no call and zero costs
    out["call"] = call
    if at.size == 0:
        return out
    call, gs, ge = call[at], gs[at], ge[at]
    s0, s1 = trace.ts[call], trace.end[call]
    drain = np.maximum(gs - s0, 0.0)
    blocked = np.maximum(np.minimum(s1, ge) - gs, 0.0)
    after = np.maximum(ge - np.maximum(s1, gs), 0.0)

    issued = _issued_copy(trace, copies, call)
    own_copy_done = (issued >= 0) & (np.abs(trace.end[np.maximum(issued, 0)] - gs) <= SYNC_TOLERANCE_US)
    copy_cov = Coverage(trace.ts[copies], trace.end[copies])
    waited_busy = busy.covered(s0, gs)
    waited_copy = copy_cov.covered(s0, gs)
    waited_for = np.where(issued >= 0, issued, last_copy[at])
    big = np.nan_to_num(trace.nbytes[np.maximum(waited_for, 0)], nan=0.0) > SMALL_COPY_BYTES
    # waiting for a small copy (a value sent to or from the host) is a round trip, not copy volume
    on_copy = (waited_copy >= MAJORITY * waited_busy) & (waited_busy > 0) & (waited_for >= 0) & big
    short_block = blocked <= np.maximum(LATENCY_US, 0.1 * drain)
    staging = own_copy_done & ~short_block
    held = np.where(short_block | staging, blocked, 0.0)
    out["held"][at] = held
    out["overlap"][at] = np.minimum(np.minimum(drain, after), ge - gs - held)
    out["external"][at] = np.where(~short_block & ~staging, blocked, 0.0)
    out["drain"][at] = drain
    out["on_copy"][at] = on_copy
    out["copy_row"][at] = np.where(on_copy, waited_for, -1)
    return out


def _issued_copy(trace: Trace, copies: np.ndarray, calls: np.ndarray) -> np.ndarray:
    """For each runtime call row (or -1): the device copy it issued, -1 if none."""
    out = np.full(calls.size, -1, dtype=np.int64)
    links = launch_of(trace)[copies]
    linked = links >= 0
    if not linked.any():
        return out
    return match(links[linked], copies[linked], calls, last=True)  # several copies of one call: the last


def _quiet_host(trace: Trace, lo: np.ndarray, hi: np.ndarray, tids: np.ndarray, min_op_us: float = 0.0) -> np.ndarray:
    """Per gap: was the launching thread mostly in CPU work that launches nothing?"""
    out = np.zeros(lo.size, dtype=bool)
    span = hi - lo
    for tid in distinct(tids).tolist():
        if tid < 0:
            continue
        on = tids == tid
        out[on] = host_work(trace, tid, min_op_us).covered(lo[on], hi[on]) >= MAJORITY * np.maximum(span[on], 1e-9)
    return out & (span > 0)


def _thread_share(lo: np.ndarray, hi: np.ndarray, tids: np.ndarray, coverage) -> np.ndarray:
    """Per gap: did its host thread spend most of [lo, hi) inside `coverage(tid)`?"""
    out = np.zeros(lo.size, dtype=bool)
    span = np.maximum(hi - lo, 1e-9)
    for tid in distinct(tids).tolist():
        if tid >= 0 or tid <= -2:  # -1: no known thread
            on = tids == tid
            out[on] = coverage(tid).covered(lo[on], hi[on]) >= MAJORITY * span[on]
    return out & (hi > lo)


def _copy_in_call(trace: Trace, copies: np.ndarray, gs: np.ndarray, ge: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Gaps the host spent inside a memcpy call, and the copy that call issued.

    Returns (copy row per gap: -1 unknown, -2 the call's copy ran elsewhere in time, so the call was
    waiting on something else; mask of gaps covered by memcpy calls).
    """
    calls = memcpy_calls(trace)
    calls = calls[np.argsort(trace.ts[calls], kind="stable")]
    covered = Coverage(trace.ts[calls], trace.end[calls]).covered(gs, ge) >= MAJORITY * (ge - gs)
    out = np.full(gs.size, -1, dtype=np.int64)
    if not covered.any():
        return out, covered
    g = np.flatnonzero(covered)
    mid = 0.5 * (gs[g] + ge[g])
    k = np.searchsorted(trace.ts[calls], mid, side="right") - 1
    call = np.where(k >= 0, calls[np.maximum(k, 0)], -1)
    c = _issued_copy(trace, copies, np.where((call >= 0) & ~(trace.end[call] < mid), call, -1))
    c_ = np.maximum(c, 0)
    adjacent = ((np.abs(trace.ts[c_] - ge[g]) <= SYNC_TOLERANCE_US) | (np.abs(trace.end[c_] - gs[g]) <= SYNC_TOLERANCE_US))
    out[g] = np.where(c >= 0, np.where(adjacent, c, -2), -1)
    return out, covered


def _last_copy_before(trace: Trace, copies: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per time: the device copy that ended last at or before it (-1 if none)."""
    if copies.size == 0:
        return np.full(t.size, -1, dtype=np.int64)
    order = np.argsort(trace.end[copies], kind="stable")
    ends = trace.end[copies][order]
    i = np.searchsorted(ends, t + SYNC_TOLERANCE_US, side="right") - 1
    return np.where(i >= 0, copies[order][np.maximum(i, 0)], -1)


def _sorted_device_rows(trace: Trace, device: int) -> np.ndarray:
    rows = device_rows(trace, device)
    return rows[np.argsort(trace.ts[rows], kind="stable")]


SLICE_OPS = 2_000_000  # GPU ops per slice: the per-gap arrays of one slice take a few hundred MB


def _analyze_sliced(trace: Trace, windows: Windows) -> GapAnalysis:
    """A trace with millions of GPU ops is analysed in time slices of SLICE_OPS ops, each with the op before
    and after it (so its first and last gap have their real length): memory stays bounded by the slice."""
    rows = _sorted_device_rows(trace, main_device(trace))
    ts = trace.ts[rows]
    inside = rows[windows.contains(ts)]
    if inside.size <= SLICE_OPS:
        return _analyze_gaps(trace, windows, rows)
    cuts = np.concatenate(([windows.lo], trace.ts[inside[SLICE_OPS::SLICE_OPS]], [windows.hi]))
    parts = []
    for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        start = np.clip(windows.start, a, b)
        end = np.clip(windows.end, a, b)
        keep = end > start
        if not keep.any():
            continue
        opened = None if windows.opened is None else np.clip(windows.opened, a, b)[keep]
        sub = Windows(start[keep], end[keep], windows.kind, windows.steps, opened=opened,
                      closed=None if windows.closed is None else windows.closed[keep])
        i = max(int(np.searchsorted(ts, a, side="left")) - 1, 0)
        j = min(int(np.searchsorted(ts, b, side="right")) + 1, rows.size)
        parts.append(_analyze_gaps(trace, sub, rows[i:j]))
    return merge_parts(parts)


def analyze_gaps(trace: Trace, windows: Windows) -> GapAnalysis:
    """Idle gaps inside the windows, each attributed to a cause (see the module docstring)."""
    return per_windows(trace, "analyze_gaps", windows, _analyze_sliced)
