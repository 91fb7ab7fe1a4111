"""The critical path's walk (analysis/idle/critical_path.py) for many windows at once.

The windows' selected rows are laid end to end (window by window, each in row order) and every pass runs once over
all of them: the predecessors of every row, the one each row waited for, and the chain from each window's last
event. Each window is walked as it was alone: a row's predecessors lie in its own window, ties fall to the earlier
row, and the chain follows the runs of previous-op-on-the-lane steps a run at a time (on a host-bound step the
chain is one thread's calls, thousands of rows in a few runs), falling back to one row at a time only where it
comes back to a row already on it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perflab.analysis.steps.links import match

EPS_US = 0.5    # timestamps of linked events from different clocks differ by this much


@dataclass
class Paths:
    """Every window's path, end to end in window order, each in time order (trace rows and, per row, its start,
    end, whether it is GPU work); `bounds[w]:bounds[w + 1]` is window w's."""
    rows: np.ndarray
    ts: np.ndarray
    end: np.ndarray
    gpu: np.ndarray
    bounds: np.ndarray


def walk_windows(trace, g, selections: list[np.ndarray]) -> Paths:
    """The critical path of each window's selected rows (sorted trace rows), each window walked as if alone:
    from the event that ends last, back along the predecessor each event waited for."""
    sizes = np.array([s.size for s in selections], dtype=np.int64)
    off = np.concatenate(([0], np.cumsum(sizes)))
    rows = np.concatenate(selections) if selections else np.zeros(0, dtype=np.int64)
    win = np.repeat(np.arange(sizes.size), sizes)
    ts = trace.ts[rows]
    end = ts + np.nan_to_num(trace.dur[rows], nan=0.0)
    gpu = g.gpu[rows]
    preds, choice, on_lane = _predecessors(trace, g, rows, win, off, ts, end, gpu)
    pos = np.empty(rows.size, dtype=np.int64)
    pos[on_lane] = np.arange(rows.size)
    # the lane position where each row's run of previous-op-on-the-lane steps begins
    by_prev = (choice >= 0) & (choice == preds[0])
    head = np.maximum.accumulate(np.where(by_prev[on_lane], -1, np.arange(rows.size)))[pos] if rows.size else pos
    after = choice[on_lane[head]]
    parts = []
    for w in range(sizes.size):
        a, b = int(off[w]), int(off[w + 1])
        if a == b:
            continue
        start = a + int(np.argmax(end[a:b]))
        runs = _runs(start, pos, head, after, b - a)
        if runs is None:   # the chain comes back to a row: walk it one row at a time
            parts.append(np.asarray(_one_by_one(start, choice, preds, end, gpu)[::-1]))
        else:
            lo, hi = runs
            n = hi - lo + 1
            parts.append(on_lane[np.repeat(lo - np.cumsum(n) + n, n) + np.arange(int(n.sum()))])
    at = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    counts = np.zeros(sizes.size, dtype=np.int64)
    counts[sizes > 0] = [p.size for p in parts]
    return Paths(rows[at], ts[at], end[at], gpu[at], np.concatenate(([0], np.cumsum(counts))))


def _runs(start: int, pos: np.ndarray, head: np.ndarray, after: np.ndarray, size: int):
    """The chain from `start` as runs of lane positions (first, last arrays, in time order); None when it is
    longer than the window's rows: it has come back to a row."""
    firsts, lasts = [], []
    total, cur = 0, start
    while cur >= 0:
        last = int(pos[cur])
        first = int(head[cur])
        firsts.append(first)
        lasts.append(last)
        total += last - first + 1
        if total > size:
            return None
        cur = int(after[cur])
    return np.array(firsts[::-1], dtype=np.int64), np.array(lasts[::-1], dtype=np.int64)


def _one_by_one(cur: int, choice: np.ndarray, preds: tuple, end: np.ndarray, gpu: np.ndarray) -> list[int]:
    """The chain one row at a time, from the last event back; where it would come back to a row, the latest of
    the predecessors not yet on it."""
    path = [cur]
    seen = {cur}
    while True:
        nxt = int(choice[cur])
        if nxt < 0:
            break
        if nxt in seen:
            left = [int(p[cur]) for p in preds if p[cur] >= 0 and int(p[cur]) not in seen]
            if not left:
                break
            nxt = max(left, key=lambda p: (float(end[p]), bool(gpu[p])))
        cur = nxt
        path.append(cur)
        seen.add(cur)
    return path


def _latest_gpu_before(t: np.ndarray, qwin: np.ndarray, by_end: np.ndarray, ends: np.ndarray, ewin: np.ndarray,
                       lane: np.ndarray, exclude: np.ndarray | None) -> np.ndarray:
    """Per time (of window qwin, ascending): the GPU op that ended last by t + EPS_US in the same window, on another
    lane than `exclude` where given; -1 if none. `by_end`: the GPU ops by (window, end), `ends` and `ewin` theirs.
    A run of same-lane neighbours in end order is skipped at once."""
    if by_end.size == 0 or t.size == 0:
        return np.full(t.size, -1, dtype=np.int64)
    i = np.empty(t.size, dtype=np.int64)
    nwin = int(max(qwin[-1], ewin[-1])) + 2
    eb = np.searchsorted(ewin, np.arange(nwin))
    qb = np.searchsorted(qwin, np.arange(nwin))
    for w in np.unique(qwin).tolist():
        a, b, qa, qz = eb[w], eb[w + 1], qb[w], qb[w + 1]
        i[qa:qz] = a + np.searchsorted(ends[a:b], t[qa:qz] + EPS_US, side="right") - 1
    if exclude is not None:
        by_end_lane = lane[by_end]
        starts = np.zeros(by_end.size, dtype=np.int64)
        changes = np.flatnonzero((by_end_lane[1:] != by_end_lane[:-1]) | (ewin[1:] != ewin[:-1])) + 1
        starts[changes] = changes
        run_start = np.maximum.accumulate(starts)
        j = np.maximum(i, 0)
        hit = (i >= 0) & (ewin[j] == qwin) & (by_end_lane[j] == exclude)
        i = np.where(hit, run_start[j] - 1, i)
    j = np.maximum(i, 0)
    return np.where((i >= 0) & (ewin[j] == qwin), by_end[j], -1)


def _predecessors(trace, g, rows, win, off, ts, end, gpu) -> tuple[tuple, np.ndarray, np.ndarray]:
    """Per row, up to three predecessors (indices into `rows`, -1 for none), in the order the walk weighs them:
    the previous op on its lane; for GPU work the runtime call that launched it, and, when it started after both,
    the op on another stream that finished just before it; for a synchronizing call the GPU op it waited for.
    Only those that ended by its start (EPS_US), or GPU ops a host call waited on. All in the row's window.
    Also the one each row waited for (the walk's choice, -1 for none) and the rows in lane order (window, GPU or
    host, lane, start, end, row)."""
    n = rows.size
    lane = np.where(gpu, trace.stream[rows], trace.tid[rows])   # GPU work by stream, the rest by host thread
    prev = np.full(n, -1, dtype=np.int64)
    launch = np.full(n, -1, dtype=np.int64)
    other = np.full(n, -1, dtype=np.int64)
    on_lane = np.lexsort((end, ts, lane, gpu, win))    # stable: ties in row order
    a, b = on_lane[:-1], on_lane[1:]
    prev[b] = np.where((gpu[b] == gpu[a]) & (lane[b] == lane[a]) & (win[b] == win[a]), a, -1)
    corr = trace.correlation[rows]
    rt = np.flatnonzero(g.rt[rows] & (corr >= 0))
    on_gpu = np.flatnonzero(gpu)
    if rt.size and on_gpu.size:   # the last call of an id in the window wins
        ids, span = corr, int(corr.max()) + 1
        if span * (off.size - 1) >= 2 ** 62:   # (window, id) keys would overflow: ids by rank
            ids = np.unique(corr, return_inverse=True)[1].reshape(-1)
            span = int(ids.max()) + 1
        want = np.where(corr[on_gpu] >= 0, win[on_gpu] * span + ids[on_gpu], -1)
        launch[on_gpu] = match(win[rt] * span + ids[rt], rt, want, last=True)
    by_end = on_gpu[np.lexsort((end[on_gpu], win[on_gpu]))]
    ends, ewin = end[by_end], win[by_end]

    def end_of(col: np.ndarray) -> np.ndarray:
        return np.where(col >= 0, end[np.maximum(col, 0)], -np.inf)
    ready = np.maximum(end_of(prev[on_gpu]), end_of(launch[on_gpu]))
    late = ts[on_gpu] - ready > EPS_US   # started later than its stream and its launch allowed: a wait
    waits, ready = on_gpu[late], ready[late]
    found = _latest_gpu_before(ts[waits], win[waits], by_end, ends, ewin, lane, lane[waits])
    other[waits] = np.where((found >= 0) & (end_of(found) > ready), found, -1)
    syncs = np.flatnonzero(~gpu & g.sync[rows])
    waited = _latest_gpu_before(end[syncs], win[syncs], by_end, ends, ewin, lane, None)
    launch[syncs] = np.where((waited >= 0) & (end_of(waited) >= ts[syncs]), waited, -1)
    # keep those that ended by the row's start (EPS_US), or GPU ops a host call waited on; per row, the one that
    # ended last (a GPU op over a host call at the same end; the first column of equals): its choice
    limit = ts + EPS_US
    prev_end = end[np.maximum(prev, 0)]
    prev = np.where((prev >= 0) & (prev_end <= limit), prev, -1)   # same lane: GPU work if and only if the row is
    best, best_end, best_gpu = prev.copy(), prev_end, gpu.copy()
    for col in (launch, other):   # set at few rows (GPU work, syncs): each pass over those only
        at = np.flatnonzero(col >= 0)
        c = col[at]
        c_end, c_gpu = end[c], gpu[c]
        kept = (c_end <= limit[at]) | (~gpu[at] & c_gpu)
        col[at[~kept]] = -1
        at, c, c_end, c_gpu = at[kept], c[kept], c_end[kept], c_gpu[kept]
        b_end = best_end[at]
        take = (best[at] < 0) | (c_end > b_end) | ((c_end == b_end) & c_gpu & ~best_gpu[at])
        at = at[take]
        best[at], best_end[at], best_gpu[at] = c[take], c_end[take], c_gpu[take]
    return (prev, launch, other), best, on_lane
