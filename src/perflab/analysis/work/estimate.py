"""What a finding's gain promises, as a speed-up a user can plan by.

A gain is the share of the time the fix gives back: a step gain g (0-100 %) is a step speed-up of
1 / (1 - g). Where a gain in % cannot express what the fix gives (an atomic storm whose fix is 100x faster
is a 99 % gain either way), the finding states a bound in its evidence instead:
`speedup_at_least` / `speedup_at_most` (of the step) or `kernel_speedup_at_least` / `kernel_speedup_at_most`
(of its kernel: the step's bound then follows from the kernel's share of the step, Amdahl's law), and a point
estimate inside them, `speedup_est` / `kernel_speedup_est`. A finding whose gain is a share of something else
states its bounds in the same unit as its gain: a memory finding's of the reserved memory (slow / fix), a serving
finding's of what its gain reads (prefill-stall: the ITL p99; padded-batch: the forwards).
"""
from __future__ import annotations

from typing import Any

MAX_GAIN_PCT = 99.9


def speedup_of_gain(gain_pct: float) -> float:
    """A gain of `gain_pct` % of the time, as a speed-up."""
    g = min(max(float(gain_pct), 0.0), MAX_GAIN_PCT)
    return 1.0 / (1.0 - g / 100.0)


def gain_of_speedup(speedup: float) -> float:
    """The share of the time (%) a speed-up gives back."""
    return 100.0 * (1.0 - 1.0 / speedup) if speedup > 1 else 0.0


def step_speedup(kernel_speedup: float, share: float) -> float:
    """Amdahl: a kernel `share` of the step made `kernel_speedup` times faster."""
    share = min(max(share, 0.0), 1.0)
    return 1.0 / (1.0 - share + share / kernel_speedup) if kernel_speedup > 0 else 1.0


def speedup_bounds(finding: Any, share: float = 1.0) -> tuple[float | None, float | None]:
    """The (at least, at most) step speed-up a finding states, None where it states none."""
    e = getattr(finding, "evidence", None) or {}
    out: list[float | None] = []
    for side in ("at_least", "at_most"):
        step = e.get(f"speedup_{side}")
        kernel = e.get(f"kernel_speedup_{side}")
        if isinstance(step, (int, float)):
            out.append(float(step))
        elif isinstance(kernel, (int, float)):
            out.append(step_speedup(float(kernel), share))
        else:
            out.append(None)
    return out[0], out[1]


def speedup_point(finding: Any, share: float = 1.0) -> float | None:
    """The point estimate of the step speed-up a finding states (evidence `speedup_est`, or `kernel_speedup_est`
    through the kernel's share of the step), None where it states none."""
    e = getattr(finding, "evidence", None) or {}
    step, kernel = e.get("speedup_est"), e.get("kernel_speedup_est")
    if isinstance(step, (int, float)):
        return float(step)
    if isinstance(kernel, (int, float)):
        return step_speedup(float(kernel), share)
    return None


def capped_gains(gains: list[float], lost_pct: float) -> list[float]:
    """Gains of findings that share the same lost time (`lost_pct` % of the step), scaled so that their sum
    never exceeds it; each keeps its order and its share of the whole."""
    total = sum(max(g, 0.0) for g in gains)
    if total <= lost_pct or total <= 0:
        return [max(g, 0.0) for g in gains]
    return [max(g, 0.0) * lost_pct / total for g in gains]
