"""Several chosen kernel launches profiled in one run of the program under Nsight Compute.

ncu takes one kernel filter and one `--launch-skip`/`--launch-count` window, counted over the launches that match
the filter from process start (ncu_plan.py says how a trace maps onto that count). One run therefore profiles the
chosen kernels of a trace when the filter matches all their function names (`^(A|B|C)$`) and the window holds a
launch of each: for every chosen kernel, a launch like the chosen one (the same kernel, grid and block, in a
recorded step), placed so the window holds as few other launches as possible (each one ncu replays costs time),
and, between windows of one size, the one whose launches lie nearest the chosen ones (the middle recorded step:
the steps before it stay a margin for set-up launches the trace does not hold). One chosen kernel alone gets its
own launch, exactly as ncu_plan.launch_plan places it.

Kernels whose launches lie too far apart for one window of at most `max_window` launches go to another window (a
second run): the fewest runs that keep every window small.

After the run the report's launches are the window's, in launch order: the launch at a member's `position` is that
kernel's. `Member.matches` checks it (function, grid, block, instantiation) so a count moved by launches the trace
does not hold shows as a launch that is not the chosen one, never as a wrong kernel read silently.
"""
from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import asdict, dataclass, field

import numpy as np

from perflab.analysis.ncu.ncu_plan import (MAX_LAUNCHES, Counting, counting, function_name, function_rows,
                                          launch_plan, launch_times, template_key)
from perflab.trace.model import Trace

MAX_WINDOW = 32     # launches one run profiles at most (each is replayed once per metric pass)


@dataclass
class Member:
    kernel: str          # the chosen kernel's full name
    function: str
    target_row: int      # the launch level 1 chose for it
    row: int             # the launch of the window that stands for it (same kernel, grid and block)
    position: int        # its index among the window's launches (= in the report)
    grid: int
    block: int

    def matches(self, full_name: str, grid: int | None, block: int | None) -> bool:
        """A profiled launch is this member's: same function, grid, block (where known) and instantiation."""
        if function_name(full_name) != self.function or template_key(full_name) != template_key(self.kernel):
            return False
        return (grid is None or self.grid <= 0 or grid == self.grid) and \
            (block is None or self.block <= 0 or block == self.block)


@dataclass
class Pass:
    functions: list[str]
    regex: str           # --kernel-name regex:REGEX (function names, ncu's default --kernel-name-base)
    skip: int            # --launch-skip: launches matching the filter before the window, from process start
    count: int           # --launch-count: the window
    per_step: float      # launches matching the filter per recorded step
    steps_before: int
    index_in_steps: int  # launches matching the filter in the recorded steps before the window
    step: int            # the recorded step (ProfilerStep number) where the window begins; -1: none
    exact: bool
    members: list[Member]
    notes: list[str] = field(default_factory=list)

    def ncu_options(self) -> list[str]:
        return ["--kernel", self.regex, "--launch-skip", str(self.skip), "--launch-count", str(self.count)]

    def to_dict(self) -> dict:
        return asdict(self)


def filter_regex(functions: list[str]) -> str:
    if len(functions) == 1:
        return f"^{re.escape(functions[0])}$"
    return "^(" + "|".join(re.escape(f) for f in functions) + ")$"


def one_pass_plans(trace: Trace, rows: list[int], *, max_window: int = MAX_WINDOW) -> list[Pass]:
    """The fewest ncu runs (windows of at most `max_window` launches each) that profile a launch like each of
    `rows` (chosen kernel launches, most important first); each kernel in the first window it fits."""
    groups: list[list[int]] = []
    for row in rows:
        for g in groups:
            if _window(trace, g + [row])[1] <= max_window:
                g.append(row)
                break
        else:
            groups.append([row])
    return [_plan(trace, g) for g in groups]


def _window(trace: Trace, rows: list[int]) -> tuple[list[int], int, np.ndarray, Counting]:
    """(per row, the position in launch order of the launch standing for it; the window's size; the matching
    launches in launch order; how the trace counts them: ncu_plan.counting)."""
    fns = {function_name(trace.name_of(r)) for r in rows}
    launches = function_rows(trace, fns)
    when = launch_times(trace, launches)
    where = {int(r): i for i, r in enumerate(launches.tolist())}
    c = counting(trace, when, "/".join(sorted(fns)))
    usable = np.isfinite(when) & ((c.idx >= 0) if c.counts.size else True)
    key = np.stack([trace.name[launches], trace.grid[launches], trace.block[launches]], axis=1) if launches.size \
        else np.zeros((0, 3))
    wanted = [where[r] for r in rows]
    choices = []
    for p in wanted:
        same = np.flatnonzero(usable & (key == key[p]).all(axis=1))
        choices.append(same.tolist() if same.size else [p])
    best = _smallest_cover(choices, wanted)
    span = max(best) - min(best) + 1
    return best, span, launches, c


def _smallest_cover(choices: list[list[int]], wanted: list[int]) -> list[int]:
    """One position from each list so that they span the fewest positions; between equal spans, the sum of the
    distances to `wanted` decides (then the earliest window)."""
    events = sorted((p, i) for i, ps in enumerate(choices) for p in ps)
    k = len(choices)
    have = [0] * k
    covered, lo = 0, 0
    best: tuple[int, int, int, int] | None = None   # (span, cost, start, end)
    for hi, (p_hi, i_hi) in enumerate(events):
        have[i_hi] += 1
        covered += have[i_hi] == 1
        while covered == k:
            p_lo, i_lo = events[lo]
            span = p_hi - p_lo + 1
            if best is None or span <= best[0]:
                cost = sum(abs(_nearest(ps, p_lo, p_hi, w) - w) for ps, w in zip(choices, wanted))
                if best is None or (span, cost) < best[:2]:
                    best = (span, cost, p_lo, p_hi)
            have[i_lo] -= 1
            covered -= have[i_lo] == 0
            lo += 1
    assert best is not None
    return [_nearest(ps, best[2], best[3], w) for ps, w in zip(choices, wanted)]


def _nearest(sorted_positions: list[int], lo: int, hi: int, target: int) -> int:
    """The position in [lo, hi] nearest `target` (the list is sorted and holds one in that range)."""
    inside = sorted_positions[bisect_left(sorted_positions, lo):bisect_left(sorted_positions, hi + 1)]
    return min(inside, key=lambda p: (abs(p - target), p))


def _plan(trace: Trace, rows: list[int]) -> Pass:
    picked, span, launches, c = _window(trace, rows)
    fns = sorted({function_name(trace.name_of(r)) for r in rows})
    lo = min(picked)
    members = []
    for target, pos in zip(rows, picked):
        row = int(launches[pos])
        members.append(Member(kernel=trace.name_of(target), function=function_name(trace.name_of(target)),
                              target_row=int(target), row=row, position=pos - lo, grid=int(trace.grid[row]),
                              block=int(trace.block[row])))
    notes = list(c.notes)
    # launches of a chosen function that differ from it (instantiations, grids): as launch_plan does, a step's worth
    # (at most MAX_LAUNCHES) is profiled, so a count moved by set-up launches the trace does not hold still meets a
    # launch like each chosen one
    count = span
    if any(launch_plan(trace, m.row).ambiguous for m in members):
        count = max(span, min(int(c.counts.max()) if c.counts.size else launches.size, MAX_LAUNCHES))
    if count > span:
        notes.append(f"launches named like a chosen kernel differ from it: ncu profiles {count} launches and "
                     "each chosen kernel's is the one that matches it")
    if span > len(rows):
        notes.append(f"the window holds {span} launches matching the filter for {len(rows)} chosen: ncu profiles "
                     f"them all and each chosen kernel's is read at its position")
    return Pass(functions=fns, regex=filter_regex(fns), skip=c.skip(lo), count=count, per_step=round(c.per_step, 3),
                steps_before=c.steps_before, index_in_steps=c.index_in_steps(lo), step=c.step_of(lo),
                exact=c.regular, members=members, notes=notes)
