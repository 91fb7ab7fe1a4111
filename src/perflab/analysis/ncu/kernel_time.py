"""One model of a kernel's time, so that what every fix would save lands on one scale.

A unit that runs at u % of its peak over the kernel's elapsed time T did work that takes u/100 x T at that
peak: its busy time. The kernel cannot end before its most loaded unit has done its work. A fix changes
the work some units do (wasted sectors, replays, local traffic, serialized atomics, idle lanes, padding and
re-reads removed; FMA work moved to the tensor pipe) or a time the kernel cannot go below (whole waves, the
warps resident). After the fix the kernel takes as long as the most loaded unit needs then:

- ceiling (the speed of light): that unit at 100 % of its peak;
- point: that unit at the pace a well-written kernel reaches (PRACTICAL, 85 % of peak) where the fix lifts
  what holds the kernel below its roofs (latency, contention, idle SMs, too few warps: `paced`), or where the
  same unit limits before and after and runs faster than that now, at its pace now; where the fix only
  removes work (wasted sectors, replays, padding, re-reads) the kernel keeps the pace its busiest unit shows;
- floor: the symptom's share of the kernel's time removed (what the rule sees the symptom cost), and no faster
  than the work left at FLOOR_PACE (60 %: ncu's line between a busy unit and a latency issue; a fix may leave the
  kernel below its roofs), whichever is slower. Never above the point; never below no gain.

Times are the kernel's (µs); speed-ups are the kernel's. Pure: no ncu metric names here beyond the units.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from perflab.analysis.ncu.ncu_sol import Units

PRACTICAL = 0.85    # what a well-written kernel reaches of its limiting unit's peak
FLOOR_PACE = 0.60   # the least a kernel that no longer has the symptom runs its limiting unit at


@dataclass
class Fix:
    """What a fix changes in one kernel's work."""

    kept: dict[str, float] = field(default_factory=dict)      # unit -> share of its work left (others keep all)
    added_us: dict[str, float] = field(default_factory=dict)  # unit -> busy time the fix adds, at the unit's peak
    only: bool = False          # the fix replaces the kernel: only the units named in kept/added_us carry work
    not_below_us: float = 0.0   # the kernel cannot get shorter than this after the fix (whole waves, ...)
    symptom_share: float | None = None   # share (0..1) of the kernel's time the symptom is seen to cost
    paced: bool = True          # the fix lifts what holds the kernel below its roofs (else it keeps its pace)
    floor_pace: float | None = None   # the pace the floor assumes, where the kernel shows a surer one than FLOOR_PACE
    also_busy_us: dict[str, float] = field(default_factory=dict)   # units the throughputs do not list (a link)
    ceiling_added_us: dict[str, float] | None = None   # added_us on the fastest path the fix allows (the ceiling)
    ceiling_kept: dict[str, float] | None = None       # kept where the fix at its best removes more (the ceiling)
    how: str = ""               # one line: what the fix changes, in the model's terms


@dataclass
class Estimate:
    now_us: float
    floor_us: float
    point_us: float
    ceiling_us: float
    limit: str | None            # the unit that would limit the kernel after the fix
    limit_busy_us: float         # its busy time then, at its peak
    pace: float                  # the share of its peak the point assumes it reaches
    how: str = ""

    @staticmethod
    def _x(now: float, after: float) -> float:
        return now / after if after > 0 else float("inf")

    @property
    def point_x(self) -> float:
        return self._x(self.now_us, self.point_us)

    @property
    def floor_x(self) -> float:
        return self._x(self.now_us, self.floor_us)

    @property
    def ceiling_x(self) -> float:
        return self._x(self.now_us, self.ceiling_us)

    @property
    def gain_pct(self) -> float:
        """The point estimate as a share of the kernel's time."""
        return 100.0 * max(0.0, 1.0 - self.point_us / self.now_us) if self.now_us > 0 else 0.0

    def evidence(self) -> dict:
        r = lambda x: round(x, 2) if x < 1e6 else round(x)  # noqa: E731
        out = {"kernel_speedup_est": r(self.point_x), "kernel_speedup_range": [r(self.floor_x), r(self.ceiling_x)],
               "kernel_speedup_at_least": r(self.floor_x), "kernel_speedup_at_most": r(self.ceiling_x),
               "kernel_us": round(self.now_us, 3), "kernel_us_after_fix_est": round(self.point_us, 3)}
        if self.limit:
            out.update({"limit_after_fix": self.limit, "limit_after_fix_busy_us": round(self.limit_busy_us, 3),
                        "limit_after_fix_pace_pct": round(100 * self.pace, 1)})
        if self.how:
            out["fix_model"] = self.how
        return out


ISSUE = "issue slots"
SM = "SM"


def busy_us(units: Units, duration_us: float, issue_pct: float | None = None) -> dict[str, float]:
    """Each measured unit's busy time at its peak over the kernel (µs); the SMs' issue slots where measured."""
    pct = {**units.memory, **units.compute, **({ISSUE: issue_pct} if issue_pct is not None else {})}
    return {u: max(0.0, v) / 100.0 * duration_us for u, v in pct.items()}


def estimate(units: Units, duration_us: float, fix: Fix, issue_pct: float | None = None) -> Estimate:
    """The kernel's time after `fix`: floor, point and ceiling (module docstring)."""
    now = {**busy_us(units, duration_us, issue_pct), **fix.also_busy_us}
    parts = (set(units.compute) - {SM}) | ({ISSUE} if issue_pct is not None else set())
    T = duration_us
    after = _after(now, fix, fix.kept, fix.added_us, parts)
    symptom = None if fix.symptom_share is None else min(max(fix.symptom_share, 0.0), 1.0)
    if not after or T <= 0 or max(after.values()) <= 0 and not fix.not_below_us:
        t = T * (1.0 - (symptom or 0.0))
        return Estimate(T, t, t, t, None, 0.0, PRACTICAL, fix.how)
    limit, load = _named(max(after.items(), key=lambda kv: kv[1]), after, parts)
    top, top_us = _named(max(now.items(), key=lambda kv: kv[1]), now, parts) if now else (None, 0.0)
    pace_now = min(1.0, top_us / T)
    same = limit == top and not (limit in parts | {SM} and _sm_follows(fix, fix.kept, fix.added_us, parts))
    if fix.paced:
        pace = max(PRACTICAL, pace_now) if same else PRACTICAL
    else:
        pace = max(pace_now, 1e-3)
    best = after
    if fix.ceiling_added_us is not None or fix.ceiling_kept is not None:
        best = _after(now, fix, fix.kept if fix.ceiling_kept is None else fix.ceiling_kept,
                      fix.added_us if fix.ceiling_added_us is None else fix.ceiling_added_us, parts)
    ceiling = min(T, max(max(best.values()), fix.not_below_us))
    point = min(T, max(load / pace, fix.not_below_us, ceiling))
    removed = T * (1.0 - symptom) if symptom is not None else T
    floor = min(T, max(removed, load / (fix.floor_pace or FLOOR_PACE), point))
    return Estimate(T, floor, point, ceiling, limit, load, pace, fix.how)


def _named(limit: tuple[str, float], busy: dict[str, float], parts: set[str]) -> tuple[str, float]:
    """The SM aggregate named by its part that is as busy (a pipe, the issue slots), where one is."""
    unit, t = limit
    if unit == SM:
        part = max(((u, busy[u]) for u in parts if u in busy), key=lambda kv: kv[1], default=None)
        if part is not None and part[1] >= 0.99 * t:
            return part[0], t
    return unit, t


def _sm_follows(fix: Fix, kept: dict[str, float], added: dict[str, float], parts: set[str]) -> bool:
    return not fix.only and SM not in kept and bool((set(kept) | set(added)) & parts)


def _after(now: dict[str, float], fix: Fix, kept: dict[str, float], added: dict[str, float],
           parts: set[str]) -> dict[str, float]:
    """Each unit's busy time after the fix. The SM's throughput is the busiest of its parts (pipes, issue slots):
    where the fix changes a part and says nothing of the SM, the SM follows its parts."""
    if fix.only:
        after = {u: now.get(u, 0.0) * k for u, k in kept.items()}
    else:
        after = {u: t * kept.get(u, 1.0) for u, t in now.items()}
    for u, t in added.items():
        after[u] = after.get(u, 0.0) + t
    if SM in after and _sm_follows(fix, kept, added, parts):
        after[SM] = max((after[u] for u in parts if u in after), default=0.0)
    return after
