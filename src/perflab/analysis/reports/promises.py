"""What a finding that disappeared had promised, against what the step time shows now (`perflab diff`).

A before-run finding's gain was a promise: fix this and the step gets 1 / (1 - gain) faster (or what bound it
stated: perflab.analysis.work.estimate). When the after run no longer has it, the measured step speed-up (median step
before / after) says how much of the promise the fix kept. Several findings gone at once share the speed-up:
their joint promise is their gains together (never more than the whole step).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from perflab.analysis.work.estimate import MAX_GAIN_PCT, speedup_bounds, speedup_of_gain


@dataclass
class Promise:
    id: str
    gain_pct: float
    promised: float                 # the speed-up its gain stood for
    at_least: float | None
    at_most: float | None
    measured: float | None          # the step's speed-up now (before / after median step time)
    verdict: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _bound(lo: float | None, hi: float | None) -> str:
    if lo is not None and hi is not None:
        return f" (stated {lo:.2f}-{hi:.2f}x)"
    if lo is not None:
        return f" (stated at least {lo:.2f}x)"
    return f" (stated at most {hi:.2f}x)" if hi is not None else ""


def _judge(fid: str, promised: float, lo: float | None, hi: float | None, measured: float | None,
           alone: bool) -> str:
    said = f"{fid} is gone: its gain promised {promised:.2f}x{_bound(lo, hi)}"
    if measured is None:
        return f"{said}; the after run has no step time to hold it against."
    shared = "" if alone else " (with the other findings gone)"
    kept = f"the step is {measured:.2f}x faster{shared}"
    inside = (lo is None or measured >= lo) and (hi is None or measured <= hi)
    if (lo is not None or hi is not None) and inside:
        return f"{said}; {kept}, inside what it stated."
    ratio = measured / promised
    if 1 / 1.25 <= ratio <= 1.25:
        return f"{said}; {kept}: as promised."
    if ratio > 1:
        return f"{said}; {kept}: {ratio:.1f}x more than promised (the fix did more than remove this cause)."
    return (f"{said}; {kept}: {100 * (measured - 1) / (promised - 1):.0f}% of the promised gain" if promised > 1
            else f"{said}; {kept}") + " (what else holds the step: the after run's findings)."


def promises(before_findings: list[Any], gone: list[str], measured: float | None) -> list[Promise]:
    """One Promise per finding id in `gone` (its strongest before-run finding), in the before run's order."""
    picked: dict[str, Any] = {}
    for f in before_findings:
        if f.id in gone and f.id != "healthy" and (f.id not in picked or f.gain_pct > picked[f.id].gain_pct):
            picked[f.id] = f
    out = []
    for fid, f in picked.items():
        lo, hi = speedup_bounds(f)
        p = speedup_of_gain(f.gain_pct)
        out.append(Promise(fid, float(f.gain_pct), round(p, 3), lo, hi, measured,
                           _judge(fid, p, lo, hi, measured, len(picked) == 1)))
    if len(out) > 1:
        total = min(sum(p.gain_pct for p in out), MAX_GAIN_PCT)
        p = speedup_of_gain(total)
        out.append(Promise("together", total, round(p, 3), None, None, measured,
                           _judge(" + ".join(x.id for x in out), p, None, None, measured, True)))
    return out
