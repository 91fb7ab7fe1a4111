"""Which events of a trace have times that cannot be true, and what to say about dropping them.

A complete event needs a finite start near the others (within a day or so) and a finite, non-negative
duration no longer than the trace itself: twice the time from its first to its last event start (a
whole-trace span starts at the beginning and lasts a little longer than that range, so it stays; a
duration of 1e300 µs does not). Annotations are the exception: a ProfilerStep closes when the program
next calls step(), which may be long after the profiler stopped recording (HTA's triton example: a 13 s
step in a 355 ms trace; the doctor's window note explains it), so they only need to end within a day.
Such events are dropped with a count by reason, never silently; when they are most of the trace,
the trace is refused (what is left would not describe the run).
"""
from __future__ import annotations

from typing import Any

import numpy as np

# Most events implausible: the file is damaged (or not written by a profiler), not a run to judge.
REFUSE_SHARE = 0.5
MIN_LIMIT_US = 1000.0  # a trace a few µs long may still hold an ordinary millisecond op
MAX_OFFSET_US = 1e11   # a start more than ~28 hours from the trace's median start is not of this run

REASONS = ("no usable start time", "no usable duration", "infinite duration", "negative duration",
           "duration longer than the trace")


def screen(ts: np.ndarray, dur: np.ndarray, annotation: np.ndarray | None = None) -> tuple[np.ndarray, dict[str, int]]:
    """(mask of the plausible events, {reason: count} for the others); `annotation` marks user annotations."""
    with np.errstate(invalid="ignore"):
        bad_ts = ~np.isfinite(ts)
        starts = ts[~bad_ts]
        # the median lies between the extremes: when they are close, no start is far from it (no median)
        if starts.size and float(starts.max() - starts.min()) > MAX_OFFSET_US:
            bad_ts |= np.abs(ts - np.median(starts)) > MAX_OFFSET_US
            starts = ts[~bad_ts]
        nan = ~bad_ts & np.isnan(dur)
        inf = ~bad_ts & np.isinf(dur)
        finite = ~bad_ts & np.isfinite(dur)
        negative = finite & (dur < 0)
        limit = max(2.0 * float(starts.max() - starts.min()), MIN_LIMIT_US) if starts.size > 1 else np.inf
        too_long = finite & (dur > limit)
        if annotation is not None:
            too_long &= ~annotation | (dur > MAX_OFFSET_US)
    masks = (bad_ts, nan, inf, negative, too_long)  # one reason per event, the first that applies
    counts = {reason: int(np.count_nonzero(m)) for reason, m in zip(REASONS, masks)}
    keep = finite & ~negative & ~too_long
    return keep, {k: v for k, v in counts.items() if v}


def summary(kept: int, reasons: dict[str, int]) -> dict[str, Any]:
    """What the trace's meta keeps (`implausible`): dropped count, of how many, and why."""
    dropped = sum(reasons.values())
    return {"dropped": dropped, "events": kept + dropped, "reasons": dict(reasons)}


def refusal(info: dict[str, Any]) -> str | None:
    """The one-line reason to refuse a trace made mostly of implausible events, else None."""
    if info["events"] and info["dropped"] > REFUSE_SHARE * info["events"]:
        return (f"{info['dropped']:,} of its {info['events']:,} events have implausible times ({_why(info)}): "
                "a damaged trace, not analysed; record the run again")
    return None


def note(meta: dict[str, Any]) -> str | None:
    """The sentence every output carries when events were dropped, else None."""
    info = meta.get("implausible") or {}
    if not info.get("dropped"):
        return None
    return (f"dropped {info['dropped']:,} of {info['events']:,} events with implausible times ({_why(info)}); "
            "the analysis leaves them out")


def _why(info: dict[str, Any]) -> str:
    return ", ".join(f"{n:,} {reason}" for reason, n in info["reasons"].items())
