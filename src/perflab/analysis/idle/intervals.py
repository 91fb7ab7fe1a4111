"""Interval arithmetic on numpy arrays of [start, end) pairs."""
from __future__ import annotations

import numpy as np

EMPTY = (np.zeros(0), np.zeros(0))


def merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals as sorted, disjoint (start, end) arrays. Touching intervals merge."""
    starts = np.asarray(starts, dtype=np.float64)
    ends = np.asarray(ends, dtype=np.float64)
    if starts.size == 0:
        return np.zeros(0), np.zeros(0)
    if starts.size > 1 and bool((starts[1:] >= starts[:-1]).all()):   # sorted already
        if bool((starts[1:] > ends[:-1]).all()) and bool((ends[1:] > ends[:-1]).all()):
            return starts.copy(), ends.copy()   # merged already: each its own group, reach == ends
        s, e = starts, ends
    else:
        order = np.argsort(starts, kind="stable")
        s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    new_group = np.empty(s.size, dtype=bool)
    new_group[0] = True
    new_group[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new_group)
    last = np.append(first[1:], s.size) - 1
    return s[first], reach[last]


def containing(starts: np.ndarray, ends: np.ndarray, t) -> np.ndarray:
    """Per time, the index of the interval [starts[i], ends[i]) that holds it, -1 outside every one (the intervals
    sorted by start and not overlapping)."""
    t = np.asarray(t, dtype=np.float64)
    i = np.searchsorted(starts, t, side="right") - 1
    return np.where((i >= 0) & (t < ends[np.maximum(i, 0)]), i, -1)


def length(starts: np.ndarray, ends: np.ndarray) -> float:
    """Total length of the union."""
    s, e = merge(starts, ends)
    return float((e - s).sum())


def clip(starts, ends, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    s = np.clip(np.asarray(starts, dtype=np.float64), lo, hi)
    e = np.clip(np.asarray(ends, dtype=np.float64), lo, hi)
    keep = e > s
    return s[keep], e[keep]


def complement(starts, ends, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """The gaps of the union within [lo, hi]."""
    s, e = merge(*clip(starts, ends, lo, hi))
    gap_s = np.concatenate(([lo], e))
    gap_e = np.concatenate((s, [hi]))
    keep = gap_e > gap_s
    return gap_s[keep], gap_e[keep]


def intersect(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Intersection of two unions (each given as any intervals; they are merged first)."""
    a_s, a_e = merge(*a)
    b_s, b_e = merge(*b)
    if a_s.size == 0 or b_s.size == 0:
        return np.zeros(0), np.zeros(0)
    # Each merged interval of b overlaps a contiguous run of merged intervals of a.
    lo_idx = np.searchsorted(a_e, b_s, side="right")
    hi_idx = np.searchsorted(a_s, b_e, side="left")
    counts = np.maximum(hi_idx - lo_idx, 0)
    if counts.sum() == 0:
        return np.zeros(0), np.zeros(0)
    b_rep = np.repeat(np.arange(b_s.size), counts)
    offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    a_idx = np.repeat(lo_idx, counts) + offsets
    s = np.maximum(a_s[a_idx], b_s[b_rep])
    e = np.minimum(a_e[a_idx], b_e[b_rep])
    keep = e > s
    return s[keep], e[keep]


def overlap_length(a, b) -> float:
    s, e = intersect(a, b)
    return float((e - s).sum())


class Coverage:
    """Fast 'how much of [x, y] is covered' queries against one union of intervals."""

    def __init__(self, starts, ends) -> None:
        s, e = merge(starts, ends)
        # entry i describes the last interval starting at or before t when i intervals do (searchsorted's i);
        # entry 0 (none does) is an empty interval at +inf: min(t, inf) - inf = -inf, so nothing is covered
        self._s = np.concatenate(([np.inf], s))
        self._e = np.concatenate(([np.inf], e))
        self.s, self.e = self._s[1:], self._e[1:]
        self._cum = np.concatenate(([0.0], np.cumsum(self.e - self.s)))
        self._full = np.concatenate(([0.0], self._cum[:-1]))   # length of the intervals before entry i's

    def covered_before(self, t: np.ndarray) -> np.ndarray:
        t = np.asarray(t, dtype=np.float64)
        if self.s.size == 0:
            return np.zeros(t.shape)
        i = np.searchsorted(self.s, t, side="right")  # intervals starting at or before t
        return self._full[i] + np.maximum(np.minimum(t, self._e[i]) - self._s[i], 0.0)

    def covered(self, lo, hi) -> np.ndarray:
        """Covered length within each [lo, hi] (vectorized)."""
        return np.maximum(self.covered_before(hi) - self.covered_before(lo), 0.0)

    def total(self) -> float:
        return float(self._cum[-1])


def difference(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Union of a minus union of b."""
    a_s, a_e = merge(*a)
    if a_s.size == 0:
        return a_s, a_e
    return intersect((a_s, a_e), complement(b[0], b[1], float(a_s[0]), float(a_e[-1])))
