"""Which launch Nsight Compute should profile to see one kernel launch of a trace, and how to tell afterwards
that it did.

ncu picks launches with `--kernel-name` (by default matched against the *function* name: no return type,
namespaces, template arguments or parameters; `--kernel-name-base function`); `--launch-skip N` then passes over
the first N launches that match, counted from the start of the process, and `--launch-count C` profiles the next
C. A trace recorded by `perflab profile` starts after some steps (the ProfilerStep#N numbers count them: with 3
warm-up steps the first recorded step is ProfilerStep#3, the profiler's own warm-up step among those 3), so the
mapping from the trace to ncu's count is

    skip = steps_before x per_step + index_in_steps

where per_step is how many matching launches a recorded step makes (exact when every recorded step makes the
same number) and index_in_steps is how many matching launches the recorded steps make before the chosen one.
Launches before the first step (set-up: weight initialisation, a warm-up call outside any step) are not in the
trace: they can only make ncu land *earlier*, never later, so the chosen launch is one in the middle of the
recorded steps, leaving the launches of the steps before it as a margin.

One function name can stand for several launches that differ (`elementwise_kernel<...>` instantiations, one
GEMM kernel run at several shapes): then ncu profiles a whole step's worth of matching launches (capped at
MAX_LAUNCHES) and `matches` tells which profiled launch is the chosen one, by function name, grid and block and,
between launches that share those, the template arguments.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import asdict, dataclass, field

import numpy as np

from perflab.analysis.steps.links import launch_of
from perflab.analysis.steps.windows import profiler_steps
from perflab.trace.model import KERNEL, Trace

MAX_LAUNCHES = 8     # launches of one ncu run when launches of the function name differ (each is replayed ~40x)


def _split_top(text: str) -> int:
    """Index of the '(' that opens the parameter list: the last one outside <...>, (...) and {...}; -1 if none."""
    depth, last = 0, -1
    for i, ch in enumerate(text):
        if ch in "<({":
            if ch == "(" and depth == 0 and i > 0:
                last = i
            depth += 1
        elif ch in ">)}":
            depth = max(depth - 1, 0)
    return last


def _strip_template(text: str) -> str:
    """'ns::kern<int, foo<2>>' -> 'ns::kern'."""
    text = text.rstrip()
    if not text.endswith(">"):
        return text
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        if text[i] == ">":
            depth += 1
        elif text[i] == "<":
            depth -= 1
            if depth == 0:
                return text[:i].rstrip()
    return text


def _last_top_space(text: str) -> int:
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        ch = text[i]
        if ch in ">)}":
            depth += 1
        elif ch in "<({":
            depth -= 1
        elif ch == " " and depth == 0:
            return i
    return -1


def function_name(kernel: str) -> str:
    """The name ncu's `--kernel-name` matches by default: 'void at::native::(anonymous namespace)::foo<int>(int*)'
    -> 'foo'; 'std::enable_if<!(false), void>::type internal::gemvx::kernel<...>(...)' -> 'kernel';
    'cutlass::Kernel2<Op>(Op::Params)' -> 'Kernel2'; a plain name ('nvjet_sm90_...') passes through."""
    text = kernel.strip().replace("(anonymous namespace)", "anonymous_namespace")
    cut = _split_top(text)
    head = _strip_template(text[:cut] if cut > 0 else text)
    head = head[_last_top_space(head) + 1:]
    return _strip_template(head).rsplit("::", 1)[-1].strip() or kernel.strip()


def template_key(kernel: str) -> str:
    """The name without its parameter list, spaces and case (demanglers differ there: '> >' and '>>', '1ul'
    and '1UL', 'char*' and 'char *'): what tells instantiations of one function apart."""
    text = kernel.strip()
    cut = _split_top(text)
    return re.sub(r"\s+", "", text[:cut] if cut > 0 else text).lower()


@dataclass
class LaunchPlan:
    kernel: str                   # the kernel's full name, as the trace has it
    function: str                 # what ncu's --kernel-name matches by default
    regex: str                    # the filter: the whole function name
    skip: int                     # --launch-skip (counts matching launches only, from process start)
    count: int                    # --launch-count
    grid: int                     # blocks of the chosen launch (-1: unknown)
    block: int                    # threads per block of the chosen launch
    per_step: float               # matching launches per recorded step
    steps_before: int             # steps the program ran before the first recorded one
    index_in_steps: int           # matching launches inside the recorded steps before the chosen one
    step: int                     # the recorded step (its ProfilerStep number) of the chosen launch; -1: none
    exact: bool                   # every recorded step launches the function equally often (skip is not estimated)
    shares_function: list[str] = field(default_factory=list)   # other kernels of the trace with that function name
    notes: list[str] = field(default_factory=list)

    @property
    def ambiguous(self) -> bool:
        return self.count > 1

    def ncu_options(self) -> list[str]:
        return ["--kernel", self.regex, "--launch-skip", str(self.skip), "--launch-count", str(self.count)]

    def perflab_command(self, program: list[str] | None, *, out: str | None = None, name: str | None = None) -> str:
        """`perflab ncu ...` that profiles these launches of `program` (a placeholder when unknown)."""
        opts = self.ncu_options() + ["--kill"]
        opts += ["--out", out] if out else []
        opts += ["--name", name] if name else []
        prog = shlex.join(program) if program else "python YOUR_SCRIPT.py"
        return f"perflab ncu {shlex.join(opts)} -- {prog}"

    def matches(self, full_name: str, grid: int | None, block: int | None) -> bool:
        """A profiled launch is the chosen one: same function name, grid and block (when both sides know them)."""
        if function_name(full_name) != self.function:
            return False
        if self.grid > 0 and grid is not None and grid != self.grid:
            return False
        return not (self.block > 0 and block is not None and block != self.block)

    def to_dict(self) -> dict:
        return {**asdict(self), "ambiguous": self.ambiguous}


def launch_times(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """When each kernel was launched (its runtime call): ncu counts launches in the order the host made them. In a
    trace that records launch calls, a kernel without one was launched before the recording began (the GPU runs
    behind the host: a warm-up step's kernel still running when the first recorded step starts): -inf, before every
    step. In a trace with no launch calls at all, the kernel's own start stands in."""
    links = launch_of(trace)
    kernels = np.flatnonzero(trace.kind == KERNEL)
    recorded = bool((links[kernels] >= 0).any()) if kernels.size else False
    mine = links[rows]
    return np.where(mine >= 0, trace.ts[np.maximum(mine, 0)], -np.inf if recorded else trace.ts[rows])


def step_index(steps, t: np.ndarray) -> np.ndarray:
    """Per time, the index of the recorded step it falls in; -1 outside every step."""
    return steps.launched_in(t)


def function_rows(trace: Trace, fn: str | set[str]) -> np.ndarray:
    """Kernel rows whose function name is `fn` (or one of a set of names), in launch order."""
    fns = {fn} if isinstance(fn, str) else set(fn)
    rows = np.flatnonzero(trace.kind == KERNEL)
    ids = [int(i) for i in np.unique(trace.name[rows]) if function_name(trace.names[int(i)]) in fns]
    matches = rows[np.isin(trace.name[rows], ids)]
    return matches[np.argsort(launch_times(trace, matches), kind="stable")]


def steady_launch(trace: Trace, rows: np.ndarray) -> int:
    """Of the kernel rows given (launches of one kernel), the first one in the middle recorded step (the
    latest step with one before it), else the middle row: far from set-up, with the steps before it as margin."""
    rows = np.asarray(rows, dtype=np.int64)
    when = launch_times(trace, rows)
    if np.isfinite(when).any():  # a launch the trace holds: one launched before it cannot be counted to
        rows, when = rows[np.isfinite(when)], when[np.isfinite(when)]
    order = np.argsort(when, kind="stable")
    rows, when = rows[order], when[order]
    steps = profiler_steps(trace)
    if len(steps):
        idx = step_index(steps, when)
        seen = sorted(set(int(i) for i in idx if i >= 0))
        if seen:
            middle = seen[len(seen) // 2]
            return int(rows[np.flatnonzero(idx == middle)[0]])
    return int(rows[len(rows) // 2])


@dataclass
class Counting:
    """How ncu's count of launches matching a filter maps onto a trace: per launch (in launch order) its recorded
    step, the launches per step, the steps the program ran before the trace."""
    idx: np.ndarray               # per launch, the index of its recorded step (-1: outside every step)
    counts: np.ndarray            # matching launches per recorded step
    per_step: float
    regular: bool                 # every recorded step makes the same number
    steps_before: int
    after: np.ndarray             # per launch: launched after the first recorded step began
    numbers: np.ndarray           # the recorded steps' ProfilerStep numbers
    notes: list[str]

    def skip(self, position: int) -> int:
        """--launch-skip that lands on the launch at `position` (launch order) of the matching launches."""
        return int(round(self.steps_before * self.per_step)) + self.index_in_steps(position)

    def index_in_steps(self, position: int) -> int:
        return int(np.count_nonzero(self.after[:position]))

    def step_of(self, position: int) -> int:
        return int(self.numbers[self.idx[position]]) if self.idx.size and self.idx[position] >= 0 else -1


def counting(trace: Trace, when: np.ndarray, what: str) -> Counting:
    """The count structure of launches launched at `when` (sorted): `what` names them in the notes."""
    steps = profiler_steps(trace)
    if not len(steps):
        return Counting(np.full(when.size, -1), np.zeros(0, int), float(when.size), False, 0,
                        np.ones(when.size, dtype=bool), np.zeros(0, int),
                        ["no steps in the trace: launches before it are not counted (ncu may land on an earlier "
                         "launch)"])
    idx = step_index(steps, when)
    counts = np.bincount(idx[idx >= 0], minlength=len(steps)) if (idx >= 0).any() else np.zeros(len(steps), int)
    per_step = float(counts.mean())
    regular = bool((counts == counts[0]).all())
    numbered = steps.found_by.startswith("ProfilerStep ranges")
    steps_before = int(steps.number[0]) if numbered else 0
    notes = []
    if not numbered:
        notes.append("the steps were found, not numbered by the profiler: launches before them are not counted")
    if steps_before and not regular:
        notes.append(f"the recorded steps launch {counts.min()}-{counts.max()} kernels named {what} each: the "
                     f"{steps_before} steps before them are estimated at {per_step:.1f} launches per step")
    return Counting(idx, counts, per_step, regular, steps_before, when >= steps.launch_start[0], steps.number, notes)


def launch_plan(trace: Trace, row: int, *, max_launches: int = MAX_LAUNCHES) -> LaunchPlan:
    """The ncu filter, skip and count that land on the launch of kernel row `row` (see the module doc)."""
    kernel = trace.name_of(row)
    fn = function_name(kernel)
    grid, block = int(trace.grid[row]), int(trace.block[row])
    matches = function_rows(trace, fn)
    chosen = int(np.flatnonzero(matches == row)[0])
    c = counting(trace, launch_times(trace, matches), fn)
    in_step = matches[c.idx == c.idx[chosen]] if c.idx[chosen] >= 0 else matches
    key = template_key(kernel)
    names = {trace.names[int(i)] for i in np.unique(trace.name[matches])}
    others = sorted(n for n in names if template_key(n) != key)
    same = {int(n): template_key(trace.names[int(n)]) == key for n in np.unique(trace.name[in_step])}  # per name
    differ = [r for r in in_step.tolist() if not same[int(trace.name[r])]
              or int(trace.grid[r]) != grid or int(trace.block[r]) != block]
    count, notes = 1, list(c.notes)
    if differ:
        period = int(c.counts.max()) if c.counts.size else int(matches.size)
        count = max(1, min(period, max_launches))
        notes.append(f"{len(differ)} launch(es) per step named {fn} differ from the chosen one (another "
                     "instantiation, grid or block): ncu profiles " f"{count} launches and the one that matches is read"
                     + ("" if period <= max_launches else
                        f" (a step launches {period}; if none matches, raise --launch-count to {period})"))
    return LaunchPlan(kernel=kernel, function=fn, regex=f"^{re.escape(fn)}$", skip=c.skip(chosen), count=count,
                      grid=grid, block=block, per_step=round(c.per_step, 3), steps_before=c.steps_before,
                      index_in_steps=c.index_in_steps(chosen), step=c.step_of(chosen),
                      exact=c.regular and c.steps_before >= 0, shares_function=others[:10], notes=notes)
