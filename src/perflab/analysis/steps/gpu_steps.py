"""Steps found from the GPU side: a serving loop that replays a CUDA graph once per step.

A serving engine's trace often has no step range on the host (no ProfilerStep, no annotation), and its host
runs milliseconds ahead of the GPU, so host times say nothing about when a step ran. The GPU side still shows
the repetition: one `cudaGraphLaunch` per step, whose kernels all carry that launch's correlation id. The
replays of one graph launch the same kernels (same count, same first kernel); the most GPU time among such
groups of at least three replays wins. Each step runs on the GPU from its replay's first kernel to the next
replay's first kernel (the eager work around the replay, such as sampling, belongs to it); a stretch between
two replays much longer than the usual period (a prefill, a pause between requests) ends one usual tail
after its replay. Pure: no torch.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perflab.analysis.idle.intervals import containing
from perflab.analysis.steps.links import gpu_rows, launch_of

MIN_REPLAYS = 3
LONG_PERIOD = 2.0      # a period this many times the median holds more than a step
MIN_SHARE = 0.3        # the replays' own GPU time must be at least this share of all GPU time


@dataclass(frozen=True)
class Replays:
    start: np.ndarray      # GPU start of each step (its replay's first GPU op)
    end: np.ndarray        # GPU end of each step window
    launches: np.ndarray   # the cudaGraphLaunch rows, one per step
    kernels: int           # GPU ops per replay
    share: float           # the replays' own GPU time / all GPU time
    covered: float         # GPU time inside the windows / all GPU time


def graph_replays(trace) -> Replays | None:
    rows = gpu_rows(trace)
    if rows.size == 0:
        return None
    links = launch_of(trace)[rows]
    is_graph = trace.name_table_mask(lambda n: "GraphLaunch" in n)
    mine = links >= 0
    mine[mine] = is_graph[links[mine]]
    if not mine.any():
        return None
    g_rows, g_links = rows[mine], links[mine]
    launches, inverse, counts = np.unique(g_links, return_inverse=True, return_counts=True)
    dur = np.nan_to_num(trace.dur, nan=0.0)
    first_ts = np.full(launches.size, np.inf)
    np.minimum.at(first_ts, inverse, trace.ts[g_rows])
    last_end = np.full(launches.size, -np.inf)
    np.maximum.at(last_end, inverse, trace.end[g_rows])
    own = np.bincount(inverse, weights=dur[g_rows], minlength=launches.size)
    first_row = np.full(launches.size, -1, dtype=np.int64)
    order = np.argsort(trace.ts[g_rows], kind="stable")[::-1]   # the earliest row written last
    first_row[inverse[order]] = g_rows[order]
    # one graph: same number of GPU ops, same first kernel
    key = counts.astype(np.int64) * (1 << 32) + trace.name[first_row].astype(np.int64)
    total = float(dur[rows].sum())
    best = None
    for k in np.unique(key).tolist():
        sel = np.flatnonzero(key == k)
        if sel.size >= MIN_REPLAYS and (best is None or own[sel].sum() > own[best].sum()):
            best = sel
    if best is None or total <= 0 or own[best].sum() < MIN_SHARE * total:
        return None
    best = best[np.argsort(first_ts[best], kind="stable")]
    start, stop = first_ts[best], last_end[best]
    nxt = np.append(start[1:], np.inf)
    period = np.diff(start)
    median = float(np.median(period)) if period.size else 0.0
    tails = nxt[:-1] - stop[:-1]
    usual = period <= LONG_PERIOD * median
    tail = float(np.median(tails[usual])) if usual.any() else 0.0
    end = np.where(np.append(usual, False), nxt, stop + max(tail, 0.0))
    end = np.maximum(np.minimum(end, nxt), stop)
    inside = _covered(trace, rows, start, end)
    return Replays(start, end, launches[best], int(counts[best[0]]), float(own[best].sum()) / total,
                   inside / total)


def _covered(trace, rows: np.ndarray, start: np.ndarray, end: np.ndarray) -> float:
    inside = containing(start, end, trace.ts[rows]) >= 0
    return float(np.nan_to_num(trace.dur[rows][inside], nan=0.0).sum())


def replay_words(trace, r: Replays) -> str:
    lead = launch_lead_ms(trace, r.launches)
    return (f"no ProfilerStep: {r.start.size} CUDA-graph replays of {r.kernels} GPU ops each (cudaGraphLaunch), each a "
            f"step on the GPU from its replay's first kernel to the next replay's; the replays run "
            f"{100 * r.share:.0f}% of the GPU time, the steps hold {100 * r.covered:.0f}%"
            + (f"; the host launched them a median {lead:,.1f} ms before the GPU ran them" if lead >= 0.1 else ""))


def launch_lead_ms(trace, launches: np.ndarray) -> float:
    """Median delay from the end of each launch call to the start of the first GPU op it launched (ms)."""
    rows = gpu_rows(trace)
    links = launch_of(trace)[rows]
    keep = np.isin(links, launches)
    if not keep.any():
        return 0.0
    first = np.full(len(trace), np.inf)
    np.minimum.at(first, links[keep], trace.ts[rows[keep]])
    delay = first[launches] - trace.end[launches]
    delay = delay[np.isfinite(delay)]
    return float(np.median(delay)) / 1e3 if delay.size else 0.0
