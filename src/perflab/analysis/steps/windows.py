"""Which stretch of the trace an analysis looks at: the ProfilerStep ranges, one step, or the GPU span.

Work outside the steps (warm-up, the profiler's own teardown, a final synchronize) is not part of
the workload's steady state, so every per-step number is computed inside these windows.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from perflab.analysis.idle.intervals import containing, merge
from perflab.analysis.steps.links import gpu_rows, launch_of
from perflab.analysis.steps.records import records_end
from perflab.errors import PerflabError
from perflab.trace.model import CPU_OP, OTHER, STEP_RE, USER_ANNOTATION, Trace


@dataclass(frozen=True)
class Steps:
    number: np.ndarray  # ProfilerStep#N numbers (found steps: 0, 1, ...), sorted by start
    start: np.ndarray
    end: np.ndarray
    found_by: str = "ProfilerStep ranges"
    rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # host rows that are the steps
    on_gpu: bool = False   # start/end are GPU times (steps found from the GPU side): they are the windows
    # on the GPU's clock, where the host opened and closed each step (launch times fall in these); None: start/end
    host_start: np.ndarray | None = None
    host_end: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.number.size)

    @property
    def launch_start(self) -> np.ndarray:
        """Where each step's launches begin: the host range on the GPU's clock, else the step's start."""
        return self.start if self.host_start is None else self.host_start

    @property
    def launch_end(self) -> np.ndarray:
        return self.end if self.host_end is None else self.host_end

    def launched_in(self, when: np.ndarray) -> np.ndarray:
        """Per launch time, the index of the step whose range holds it (-1 outside every step)."""
        return containing(self.launch_start, self.launch_end, when)


@dataclass(frozen=True)
class Windows:
    start: np.ndarray
    end: np.ndarray
    kind: str                 # "steps" | "step" | "gpu-span" | "trace-span"
    steps: tuple[int, ...] = ()
    found_by: str = ""        # how the steps were found, in words
    # where the host opened each window, when its start was moved later to the first GPU op (_head_on_gpu): what
    # lies inside (launches, host ops) is judged from here; the window's time (idle, busy) counts from start
    opened: np.ndarray | None = None
    # on the GPU's clock, where the host closed each window's last step: a launch after it made a later step's work
    closed: np.ndarray | None = None

    @property
    def total(self) -> float:
        return float((self.end - self.start).sum())

    @property
    def lo(self) -> float:
        return float(self.start.min()) if self.start.size else 0.0

    @property
    def hi(self) -> float:
        return float(self.end.max()) if self.end.size else 0.0

    @property
    def key(self) -> tuple:
        """Hashable identity, for caching analyses per window set."""
        return (self.kind, self.steps, self.lo, self.hi, round(self.total, 3))

    def contains(self, t: np.ndarray) -> np.ndarray:
        """Boolean per time: inside some window (from where the host opened it)."""
        return self.index_of(t) >= 0

    def index_of(self, t: np.ndarray) -> np.ndarray:
        """Window index per time, -1 outside every window (from where the host opened it: no GPU op starts
        between that and a moved start, and the host ops and launches there belong to the window)."""
        return containing(self.start if self.opened is None else self.opened, self.end, t)

    def ran_in(self, t: np.ndarray) -> np.ndarray:
        """Window index per GPU time (-1 outside): the windows themselves, not where the host opened them."""
        return containing(self.start, self.end, t)

    def launched_in(self, t: np.ndarray) -> np.ndarray:
        """Window index per launch time: index_of, but on the GPU's clock only launches made while the host was
        inside the window's steps (a launch after them made later work, which runs after the window)."""
        i = self.index_of(t)
        if self.closed is None:
            return i
        t = np.asarray(t, dtype=np.float64)
        return np.where((i >= 0) & (t < self.closed[np.maximum(i, 0)]), i, -1)


def profiler_steps(trace: Trace) -> Steps:
    """The ProfilerStep#N ranges; without them, the steps analysis.steps.step_finder finds (annotations, iterations)."""
    def compute() -> Steps:
        is_step = trace.name_table_mask(lambda n: STEP_RE.fullmatch(n.strip()) is not None)
        rows = np.flatnonzero(is_step & np.isin(trace.kind, (USER_ANNOTATION, CPU_OP)))
        if rows.size == 0:
            return _found_steps(trace)
        numbers = np.array([int(STEP_RE.fullmatch(trace.names[i].strip()).group(1)) for i in trace.name[rows]])
        # One range per step number: the longest record of it.
        order = np.lexsort((-trace.dur[rows], numbers))
        numbers, rows = numbers[order], rows[order]
        first = np.concatenate(([True], numbers[1:] != numbers[:-1]))
        numbers, rows = numbers[first], rows[first]
        by_start = np.argsort(trace.ts[rows], kind="stable")
        rows = rows[by_start]
        return _paced(trace, Steps(numbers[by_start], trace.ts[rows].copy(), trace.end[rows].copy(), rows=rows))
    return trace.cached("steps", compute)


def _paced(trace: Trace, steps: Steps) -> Steps:
    """Host step ranges on the clock that paces them (analysis/steps/gpu_clock.py): where the host runs ahead of the
    GPU, each step becomes the GPU work its launches made."""
    from perflab.analysis.steps import gpu_clock

    if steps.on_gpu or len(steps) == 0 or np.any(steps.start[1:] < steps.end[:-1]):
        return steps
    lo, hi = gpu_clock.launch_spans(steps.start, steps.end)
    work = gpu_clock.range_work(trace, lo, hi)
    clk = gpu_clock.clock(trace, steps.start, steps.end, work)
    trace.cache["step_clock"] = clk
    if not clk.gpu:
        return steps
    start, end = gpu_clock.gpu_windows(work, steps.start)
    return Steps(steps.number, start, end, f"{steps.found_by}; {clk.words}", steps.rows, on_gpu=True,
                 host_start=lo, host_end=hi)


def step_clock(trace: Trace):
    """The clock the steps were read on (gpu_clock.Clock), None where no host ranges were weighed."""
    profiler_steps(trace)
    return trace.cache.get("step_clock")


def _found_steps(trace: Trace) -> Steps:
    from perflab.analysis.steps.step_finder import find_steps

    found = find_steps(trace)
    if found is None:
        empty = np.zeros(0)
        return Steps(np.zeros(0, dtype=np.int64), empty, empty, found_by="")
    lo = hi = None
    if found.rows.size == found.start.size and found.how == "gpu":
        from perflab.analysis.steps.gpu_clock import launch_spans

        lo, hi = launch_spans(trace.ts[found.rows], trace.end[found.rows])
    steps = Steps(np.arange(found.start.size, dtype=np.int64), found.start, found.end, found.found_by, found.rows,
                  on_gpu=found.how == "gpu", host_start=lo, host_end=hi)
    return _paced(trace, steps) if found.how == "ranges" else steps


def step_completion(trace: Trace) -> np.ndarray:
    """Per ProfilerStep: when it is done, host and device: the later of its CPU end and the end of
    the last GPU op launched inside it. With a host that runs ahead of the GPU, the CPU ranges are
    short and the GPU work of a step ends steps later; this is when the step's work really ends."""
    def compute() -> np.ndarray:
        steps = profiler_steps(trace)
        done = steps.end.copy()
        rows = gpu_rows(trace)
        if not len(steps) or rows.size == 0 or steps.on_gpu:
            return done
        links = launch_of(trace)[rows]
        when = np.where(links >= 0, trace.ts[np.maximum(links, 0)], trace.ts[rows])
        i = containing(steps.start, steps.end, when)
        inside = i >= 0
        np.maximum.at(done, i[inside], trace.end[rows][inside])
        return done
    return trace.cached("step_completion", compute)


def step_times(trace: Trace) -> np.ndarray:
    """Steady-state time per step: spacing of consecutive completions (the first: its own span)."""
    steps = profiler_steps(trace)
    if not len(steps):
        return np.zeros(0)
    done = np.maximum.accumulate(step_completion(trace))
    return np.diff(np.concatenate(([steps.start[0]], done)))


def analysis_windows(trace: Trace, step: int | None = None) -> Windows:
    steps = profiler_steps(trace)
    if step is not None:
        hit = np.flatnonzero(steps.number == step)
        if hit.size == 0:
            have = (f"steps {int(steps.number.min())}..{int(steps.number.max())}" if len(steps)
                    else "no ProfilerStep ranges")
            raise PerflabError(f"no ProfilerStep#{step} in {trace.meta.get('path', 'the trace')} (it has {have})")
        i = int(hit[0])
        done = np.minimum(np.maximum.accumulate(step_completion(trace)), _recorded_end(trace))
        # the step's own work starts once the previous step's work is done (the host may run ahead)
        start = max(float(steps.start[i]), float(done[i - 1]) if i > 0 else -np.inf)
        end = max(float(done[i]), start)
        return Windows(np.array([start]), np.array([end]), "step", (int(step),), steps.found_by)
    if len(steps):
        # A step cut short by the end of profiling claims time nothing was recorded in.
        end = np.minimum(step_completion(trace), _recorded_end(trace))
        keep = end > steps.start
        start, end = merge(steps.start[keep], end[keep])
        if steps.host_start is not None:
            # steps on the GPU's clock that the host opened earlier: what lies inside (launches, host ops) is judged
            # from where the host opened the first step of each window
            w = np.searchsorted(start, steps.start[keep], side="right") - 1
            opened, closed = start.copy(), np.full(start.size, -np.inf)
            np.minimum.at(opened, w, steps.host_start[keep])
            np.maximum.at(closed, w, steps.launch_end[keep])
            return Windows(start, end, "steps", tuple(int(n) for n in steps.number[keep]), steps.found_by, opened,
                           closed)
        opened = start
        start, found_by = _head_on_gpu(trace, start, end, steps.found_by)
        return Windows(start, end, "steps", tuple(int(n) for n in steps.number[keep]), found_by,
                       None if start is opened else opened)
    rows = gpu_rows(trace)
    if rows.size:  # from the first launch to the end of the last GPU op (or where the GPU records stop)
        links = launch_of(trace)[rows]
        first = min(float(trace.ts[rows].min()), float(trace.ts[links[links >= 0]].min(initial=np.inf)))
        last = min(float(trace.end[rows].max()), records_end(trace))
        opened = np.array([first])
        start, found_by = _head_on_gpu(trace, opened, np.array([max(last, first)]), _NO_STEPS + "GPU work")
        return Windows(start, np.array([max(last, first)]), "gpu-span", (), found_by,
                       None if start is opened else opened)
    return Windows(np.array([trace.ts.min()]), np.array([trace.end.max()]), "trace-span", (), _NO_STEPS + "trace")


DEEP_QUEUE_US = 1000.0   # analysis/idle/gaps.py: an op starting this long after its launch returned was queued


def _head_on_gpu(trace: Trace, start: np.ndarray, end: np.ndarray, found_by: str) -> tuple[np.ndarray, str]:
    """A window whose first GPU op started >= 1 ms after its launch returned begins at that op: before it the
    GPU ran work the trace does not hold (launched before profiling began) while the host ran ahead, so the
    idle the trace shows there is no one's wait. A window the GPU enters busy with an op the trace holds (started
    before it) keeps its start: the trace shows what ran, and any idle after it is an ordinary gap (gaps.py)."""
    rows = gpu_rows(trace)
    if rows.size == 0 or start.size == 0:
        return start, found_by
    order = np.argsort(trace.ts[rows], kind="stable")
    ts = trace.ts[rows[order]]
    links = launch_of(trace)[rows[order]]
    busy_until = np.maximum.accumulate(trace.end[rows[order]])
    i = np.searchsorted(ts, start)
    ok = (i < ts.size)
    before = np.where(i > 0, busy_until[np.maximum(i - 1, 0)], -np.inf)
    i = np.minimum(i, ts.size - 1)
    first, link = ts[i], links[i]
    lead = np.where(link >= 0, first - trace.end[np.maximum(link, 0)], 0.0)
    move = ok & (first < end) & (first > start) & (lead >= DEEP_QUEUE_US) & (before <= start)
    if not move.any():
        return start, found_by
    cut = float((first - start)[move].sum())
    new = np.where(move, first, start)
    return new, (found_by + f"; {cut / 1e3:,.1f} ms cut from the start of the windows: their first GPU op ran "
                 f"{float(lead[move].max()) / 1e3:,.1f} ms after its launch, the GPU busy with work launched "
                 "before the trace began")


_NO_STEPS = ("no steps found (no ProfilerStep, NVTX step range, repeated annotation or iteration that launches "
             "most of the GPU work): the analysis covers the span of the ")


def _recorded_end(trace: Trace) -> float:
    """End of the last event other than the profiler's own span and the step ranges; earlier when the GPU
    records stop before the launches do (analysis/steps/records.py)."""
    def compute() -> float:
        ignore = (trace.kind == OTHER) | trace.name_table_mask(lambda n: STEP_RE.fullmatch(n.strip()) is not None)
        ends = trace.end[~ignore]
        last = float(ends.max()) if ends.size else float(trace.end.max())
        return min(last, records_end(trace))
    return trace.cached("recorded_end", compute)


def per_windows(trace: Trace, name: str, windows: Windows, compute):
    """Memoize an analysis of (trace, windows) on the trace."""
    return trace.cached(f"{name}:{windows.key}", lambda: compute(trace, windows))


def trace_origin(trace: Trace) -> float:
    """Times in evidence are relative to the first event of the trace."""
    return trace.cached("origin", lambda: float(trace.ts.min()) if len(trace) else 0.0)
