"""Periodic outliers among numbered user annotations: the kind of custom rule lab 05 asks for.

A workload that wraps each iteration in ``record_function("iteration#N")`` gives the trace one
user_annotation range per iteration. `annotation_outliers` finds the iterations that take far longer
than the typical one on the host, and whether they recur with a fixed period (every 10th iteration
runs an audit, a checkpoint, a logging hook...). Pure: no torch.
"""
from __future__ import annotations

import re
from collections import Counter

import numpy as np

from perflab.analysis.steps.windows import Windows
from perflab.trace.model import USER_ANNOTATION, Trace

DEFAULT_PATTERN = r"iteration#(\d+)"
OUTLIER_FACTOR = 3.0


def numbered_ranges(trace: Trace, pattern: str = DEFAULT_PATTERN, windows: Windows | None = None):
    """(numbers, durations µs, rows) of host user annotations whose name matches `pattern` (group 1: N)."""
    rx = re.compile(pattern)
    table = [rx.fullmatch(n.strip()) for n in trace.names]
    hit = np.fromiter((m is not None for m in table), dtype=bool, count=len(table))
    rows = np.flatnonzero(hit[trace.name] & (trace.kind == USER_ANNOTATION) & (trace.dur > 0)) \
        if len(trace.names) else np.zeros(0, dtype=np.int64)
    if windows is not None and rows.size:
        rows = rows[windows.contains(trace.ts[rows])]
    numbers = np.array([int(table[int(trace.name[r])].group(1)) for r in rows], dtype=np.int64)
    order = np.argsort(numbers, kind="stable")
    return numbers[order], trace.dur[rows][order], rows[order]


def annotation_outliers(trace: Trace, pattern: str = DEFAULT_PATTERN, factor: float = OUTLIER_FACTOR,
                        windows: Windows | None = None) -> dict:
    """The numbered ranges lasting more than `factor` x the median one, their period and phase.

    period: the most common difference between consecutive outlier numbers (0 with fewer than two);
    phase: the first outlier's number modulo the period; extra_us: median outlier duration minus the
    median duration of the others.
    """
    numbers, dur, _rows = numbered_ranges(trace, pattern, windows)
    if numbers.size == 0:
        return {"ranges": 0, "outliers": [], "period": 0, "phase": -1, "median_us": 0.0, "extra_us": 0.0}
    median = float(np.median(dur))
    slow = dur > factor * median
    out = numbers[slow]
    diffs = Counter(np.diff(out).tolist())
    period = int(max(diffs, key=lambda d: (diffs[d], -d))) if diffs else 0
    rest = dur[~slow]
    extra = float(np.median(dur[slow]) - (np.median(rest) if rest.size else 0.0)) if slow.any() else 0.0
    return {"ranges": int(numbers.size), "outliers": out.tolist(), "period": period,
            "phase": int(out[0] % period) if period else (int(out[0]) if out.size else -1),
            "median_us": median, "extra_us": extra}
