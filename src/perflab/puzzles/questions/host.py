"""Host-side analyses for diagnosis questions: where the step thread's time goes, which Python code.

They read analysis.idle.cpu_host, so they answer the same on a GPU trace and on a CPU-only one; they
register into questions.ANALYSES on import (the package finds it by discovery).
"""
from __future__ import annotations

from typing import Any

from perflab.errors import PerflabError
from perflab.puzzles.questions.registry import Computed, analysis

PARTS = ("python", "ops", "dataloader", "host", "dispatch")


def _split(ev: Any, variant: str) -> dict:
    from perflab.analysis.idle.cpu_host import cpu_time_split
    from perflab.analysis.steps.windows import analysis_windows

    trace = ev.trace(variant)
    return cpu_time_split(trace, analysis_windows(trace))


@analysis
def host_time_pct(ev: Any, variant: str = "slow", part: str = "python") -> Computed:
    """Percent of step time the step thread spends in Python outside torch ops (python = host + dispatch:
    long stretches and the short ones between ops), in ops, or in the DataLoader."""
    if part not in PARTS:
        raise PerflabError(f"host_time_pct part {part!r} must be one of {', '.join(PARTS)}")
    split = _split(ev, variant)
    steps = max(split["steps"], 1)
    evidence = {f"{k} %": round(v, 1) for k, v in split["pct"].items()}
    evidence.update({"step ms": round(split["window_us"] / 1e3 / steps, 3), "steps": split["steps"]})
    return Computed(round(split["pct"][part], 2), evidence, f"the step thread of the recorded {variant} trace")


@analysis
def culprit_function(ev: Any, variant: str = "slow") -> Computed:
    """file.py:function of the Python source frame that holds the most host time (needs a with_stack trace)."""
    frames = [f for f in _split(ev, variant)["top_python_frames"] if f["where"]]
    if not frames:
        raise PerflabError(f"the recorded {variant} trace has no Python frames: record it with "
                           "[profile] with_stack = true")
    top = frames[0]
    evidence = {f["where"]: f"{f['python_us'] / 1e3:.1f} ms" for f in frames}
    return Computed(top["where"], evidence, f"the Python stacks of the recorded {variant} trace",
                    alternatives=tuple(f["where"] for f in frames[1:]))


OUTLIER_STATS = ("period", "phase", "extra_ms", "count")


@analysis
def periodic_outliers(ev: Any, variant: str = "slow", stat: str = "period", pattern: str = r"iteration#(\d+)",
                      factor: float = 3.0) -> Computed:
    """Numbered annotations (`pattern`, group 1 = N) that last > factor x the median: their period,
    phase (first outlier's N mod period), extra ms over a typical one, or count."""
    from perflab.analysis.steps.annotations import annotation_outliers
    from perflab.analysis.steps.windows import analysis_windows

    if stat not in OUTLIER_STATS:
        raise PerflabError(f"periodic_outliers stat {stat!r} must be one of {', '.join(OUTLIER_STATS)}")
    trace = ev.trace(variant)
    found = annotation_outliers(trace, pattern, factor, analysis_windows(trace))
    if not found["outliers"]:
        raise PerflabError(f"no range matching {pattern!r} in the recorded {variant} trace lasts "
                           f"{factor:g}x its median")
    value = {"period": found["period"], "phase": found["phase"], "extra_ms": round(found["extra_us"] / 1e3, 3),
             "count": len(found["outliers"])}[stat]
    evidence = {"ranges": found["ranges"], "outliers (N)": ", ".join(map(str, found["outliers"][:12])),
                "period": found["period"], "phase": found["phase"],
                "median range ms": round(found["median_us"] / 1e3, 3),
                "extra ms": round(found["extra_us"] / 1e3, 3)}
    return Computed(value, evidence, f"the {pattern} ranges of the recorded {variant} trace")
