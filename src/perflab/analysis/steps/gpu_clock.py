"""Host ranges read on the clock that paces their work.

A range on the host (a ProfilerStep, an engine's iteration annotation) says when the host launched a step's work,
not when the GPU ran it. When the host waits for the GPU at the end of every step (a `.item()`, a sync), the two
agree. When it does not, the host runs ahead: its ranges are short and end long before their kernels start, and
the GPU runs step i's work while the host is already launching step i+3's. Then a step is the GPU work its own
launches made (linked by correlation id, graph launches included), and it lasts from the end of the previous
step's work on the GPU to the end of its own: the time the user waits for its result. Pure: no torch.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perflab.analysis.idle.intervals import containing
from perflab.analysis.steps.links import gpu_rows, launch_of
from perflab.trace.model import Trace

AHEAD_MIN_US = 20.0   # a launch-to-start delay under this is the launch's own latency, not a queue


@dataclass(frozen=True)
class RangeWork:
    """The GPU work each host range launched (NaN where it launched none)."""
    gpu_start: np.ndarray   # the first GPU op's start
    gpu_end: np.ndarray     # the last GPU op's end
    busy_us: np.ndarray     # the GPU ops' union
    ops: np.ndarray         # how many GPU ops
    lead_us: np.ndarray     # the first GPU op's start minus the end of the call that launched it

    @property
    def done(self) -> np.ndarray:
        """When each range's work was done on the GPU, in order (a later range cannot finish before an earlier)."""
        end = np.where(np.isfinite(self.gpu_end), self.gpu_end, -np.inf)
        return np.maximum.accumulate(end)


def launch_spans(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each range's launches lie: from its start to the next range's start (work a loop launches after its
    annotation closes, such as sampling or the copy of its result, is still that iteration's); the last one to
    its end plus the usual time from a range's end to the next one's start."""
    if starts.size == 0:
        return starts, ends
    after = starts[1:] - ends[:-1]
    tail = float(np.median(np.clip(after, 0, None))) if after.size else 0.0
    return starts, np.r_[starts[1:], ends[-1] + tail]


def range_work(trace: Trace, starts: np.ndarray, ends: np.ndarray, tid: int | None = None) -> RangeWork:
    """Per host range [starts[i], ends[i]) (sorted, not overlapping): the GPU ops launched inside it, from thread
    `tid` when given (another thread's launches belong to its own ranges)."""
    n = starts.size
    rows = gpu_rows(trace)
    links = launch_of(trace)[rows]
    keep = links >= 0
    rows, links = rows[keep], links[keep]
    if tid is not None:
        mine = trace.tid[links] == tid
        rows, links = rows[mine], links[mine]
    i = containing(starts, ends, trace.ts[links])
    inside = i >= 0
    rows, links, i = rows[inside], links[inside], i[inside]
    ts, end = trace.ts[rows], trace.end[rows]
    gpu_start = np.full(n, np.inf)
    np.minimum.at(gpu_start, i, ts)
    gpu_end = np.full(n, -np.inf)
    np.maximum.at(gpu_end, i, end)
    ops = np.bincount(i, minlength=n)
    order = np.lexsort((ts, i))
    gi, gts, gend, glink = i[order], ts[order], end[order], links[order]
    busy = np.zeros(n)
    first = np.flatnonzero(np.r_[True, gi[1:] != gi[:-1]]) if gi.size else np.zeros(0, dtype=np.int64)
    for a, b in zip(first.tolist(), np.r_[first[1:], gi.size].tolist()):
        reach = np.maximum.accumulate(gend[a:b])
        prev = np.r_[gts[a], reach[:-1]]
        busy[gi[a]] = float(np.clip(gend[a:b] - np.maximum(gts[a:b], prev), 0, None).sum())
    lead = np.full(n, np.nan)
    if first.size:
        lead[gi[first]] = gts[first] - trace.end[glink[first]]
    none = ops == 0
    gpu_start[none], gpu_end[none] = np.nan, np.nan
    return RangeWork(gpu_start, gpu_end, busy, ops, lead)


def gpu_gap_us(trace: Trace, lo: float, hi: float) -> float:
    """The median idle gap between consecutive GPU ops starting in [lo, hi) (0 when they run back to back)."""
    rows = gpu_rows(trace)
    ts = trace.ts[rows]
    sel = rows[(ts >= lo) & (ts < hi)]
    if sel.size < 2:
        return 0.0
    order = np.argsort(trace.ts[sel], kind="stable")
    ts, end = trace.ts[sel][order], np.maximum.accumulate(trace.end[sel][order])
    return float(np.median(np.clip(ts[1:] - end[:-1], 0, None)))


@dataclass(frozen=True)
class Clock:
    gpu: bool            # read on the GPU's clock (the host runs ahead)
    lead_us: float       # median delay from a range's first launch returning to its first GPU op starting
    gap_us: float        # median idle gap between GPU ops
    behind_us: float     # median time a range's GPU work ends after the range ends on the host
    words: str           # the choice, in words, for the report

    def to_dict(self) -> dict:
        return {"clock": "gpu" if self.gpu else "host", "launch_to_start_ms": round(self.lead_us / 1e3, 4),
                "gpu_gap_us": round(self.gap_us, 3), "gpu_end_after_host_end_ms": round(self.behind_us / 1e3, 4),
                "why": self.words}


def clock(trace: Trace, starts: np.ndarray, ends: np.ndarray, work: RangeWork, what: str = "step") -> Clock:
    """Which clock paces the ranges: the GPU's when the host runs ahead (its launches wait in the queue longer
    than the GPU waits between ops, and its ranges end before their GPU work does), else the host's."""
    has = work.ops > 0
    if not has.any():
        return Clock(False, 0.0, 0.0, 0.0, "the host's clock: the ranges launched no GPU work")
    lead = float(np.nanmedian(work.lead_us[has]))
    behind = float(np.median(work.gpu_end[has] - ends[has]))
    gap = gpu_gap_us(trace, float(np.nanmin(work.gpu_start[has])), float(np.nanmax(work.gpu_end[has])))
    ahead = lead > max(gap, AHEAD_MIN_US) and behind > 0
    if ahead:
        a = "an" if what[0] in "aeiou" else "a"
        words = (f"on the GPU's clock: the host runs ahead (each {what}'s first kernel started a median "
                 f"{lead / 1e3:,.2f} ms after its launch returned, longer than the median {gap:,.1f} µs gap between "
                 f"GPU ops, and its GPU work ended a median {behind / 1e3:,.2f} ms after its host range), so {a} {what} "
                 f"is the GPU work its launches made, from the end of the previous {what}'s on the GPU to the end of "
                 "its own")
    else:
        words = (f"on the host's clock: each {what}'s GPU work runs inside its range (launch to start a median "
                 f"{lead / 1e3:,.3f} ms)")
    return Clock(ahead, lead, gap, behind, words)


QUEUED_US = 1000.0   # a first op this long after its launch returned found the GPU busy with work before the trace


def gpu_windows(work: RangeWork, host_start: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Each range's window on the GPU clock, the windows tiling the GPU's time: from the previous range's work done
    to its own work done. Idle between two ranges' work is the later range's: the GPU waited for its launches. The
    first starts where its host range opened when its first op started soon after its launch (the GPU waited for
    the host), else at that op (the GPU was busy with work launched before the trace began). A range that launched
    nothing gets an empty window at the previous end."""
    done = work.done
    ran = np.flatnonzero(np.isfinite(work.gpu_start))
    origin = float(work.gpu_start[ran[0]]) if ran.size else 0.0
    if host_start is not None and ran.size and ran[0] == 0 and work.lead_us[0] < QUEUED_US:
        origin = min(origin, float(host_start[0]))
    start = np.r_[origin, done[:-1]]
    start = np.where(np.isfinite(start), start, origin)
    end = np.maximum(np.where(np.isfinite(done), done, origin), start)
    return start, end


def gpu_periods(work: RangeWork, host_start: np.ndarray | None = None) -> np.ndarray:
    """Each range's time on the GPU clock: its work done minus the previous range's (the first: gpu_windows')."""
    start, end = gpu_windows(work, host_start)
    return end - start
