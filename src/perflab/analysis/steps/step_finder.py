"""Steps of a trace recorded without torch.profiler's schedule (no ProfilerStep ranges).

A step is one repetition of the workload. Without ProfilerStep#N ranges, the trace still shows the
repetitions in two ways:

- ranges: a host range that repeats (a record_function / NVTX annotation such as vLLM's
  `execute_context_...`, a top-level module call, a training-loop function with with_stack) and
  whose occurrences together launch most of the GPU work: each occurrence is a step. The outermost
  such repetition wins (iterations, not the layers inside them); a range that occurs once and wraps
  everything is no repetition and does not hide the ones inside it.
- iterations: a marker that repeats at a regular period (`Optimizer.zero_grad`, `Optimizer.step`, a
  data-loading range) while the GPU work between consecutive markers makes up most of the trace's: the
  steps run from one start of the marker to the next.

- replays (analysis/steps/gpu_steps.py), when the host shows neither: one CUDA-graph replay per step, on the GPU side.

Operators of the dispatcher (`aten::mm`, autograd nodes, ...) are layers of a step, never steps; nor
are communication ranges or the DataLoader. When nothing qualifies there are no steps and the
analyses use the span of the GPU work. `found_by` says in words which way was used. Pure: no torch.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from perflab.analysis.steps.links import gpu_rows, launch_of
from perflab.analysis.idle.wait_names import is_wait
from perflab.trace.model import CPU_OP, PYTHON, STEP_RE, USER_ANNOTATION, Trace

MIN_COVERAGE = 0.6          # share of the GPU work (by GPU time) the step ranges must launch
MIN_PERIODIC_COVERAGE = 0.8  # share launched between the first and the last iteration's marker
MIN_ITERATIONS = 3
MAX_PERIOD_SPREAD = 2.0     # longest / median and median / shortest period of an iteration marker
MIN_SPAN_SHARE = 0.3        # a candidate's ranges must last at least this share of the GPU span
TOUCH_US = 1.0             # ranges closer than this touch
MAX_PROLOGUE = 0.5          # a single step range may spend at most this share of itself before its first launch

_NOT_A_STEP = re.compile(
    r"DataLoader|dataloader|^(nccl|gloo|mpi|ucc|c10d)[:_]|^record_param_comms$|^\[memory\]$|"
    r"^torch/profiler/|^<built-in|^cuda(Graph)?::|^PyTorch Profiler", re.I)
_SOURCE_FRAME = re.compile(r"^.*\.py\(\d+\): .+$")


@dataclass(frozen=True)
class Found:
    start: np.ndarray
    end: np.ndarray
    rows: np.ndarray   # host rows that are the step ranges themselves (empty for iterations)
    how: str           # "ranges" | "iterations" | "gpu" (start/end are GPU times: analysis.steps.gpu_steps)
    found_by: str      # in words, for the report


def _candidate_name(name: str, kind: int) -> bool:
    text = name.strip()
    if not text or STEP_RE.fullmatch(text) or _NOT_A_STEP.search(text) or is_wait(text):
        return False  # a blocking wait (poll, select, futex) repeats on a background thread: never a step
    if kind == CPU_OP:  # record_function ranges are ops of old traces; dispatcher ops are not steps
        return "::" not in text and not re.search(r"Backward\d*$", text)
    if kind == PYTHON:
        return text.startswith("nn.Module: ") or _SOURCE_FRAME.match(text) is not None
    return kind == USER_ANNOTATION


def _outermost(ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Indices (into sorted-by-start arrays) of the occurrences not inside an earlier one."""
    reach = np.maximum.accumulate(end)
    keep = np.ones(ts.size, dtype=bool)
    keep[1:] = ts[1:] >= reach[:-1] - TOUCH_US  # back-to-back ranges touch (float µs since the epoch)
    return np.flatnonzero(keep)


def _gpu_work(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """(launch time, GPU µs) of every GPU op, by launch time; unlinked ops by their own start."""
    rows = gpu_rows(trace)
    links = launch_of(trace)[rows]
    when = np.where(links >= 0, trace.ts[np.maximum(links, 0)], trace.ts[rows])
    order = np.argsort(when, kind="stable")
    return when[order], np.nan_to_num(trace.dur[rows][order], nan=0.0)


def _launched(when: np.ndarray, cum: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """GPU µs launched inside each [lo, hi)."""
    return cum[np.searchsorted(when, hi, side="left")] - cum[np.searchsorted(when, lo, side="left")]


def find_steps(trace: Trace) -> Found | None:
    """A serving engine's (or the user's) iteration markers first, then host ranges or iterations; without them,
    CUDA-graph replays on the GPU side."""
    from perflab.analysis.steps.gpu_steps import graph_replays, replay_words

    found = _marked_iterations(trace)
    if found is not None:
        return found
    found = _host_steps(trace)
    if found is not None:
        return found
    r = graph_replays(trace)
    if r is None:
        return None
    return Found(r.start.copy(), r.end.copy(), np.zeros(0, dtype=np.int64), "gpu", replay_words(trace, r))


def _marked_iterations(trace: Trace) -> Found | None:
    """Iteration markers (analysis/steps/iterations.py) that launch most of the GPU work: each one a step, a family
    of names (an engine names each iteration after its batch), on the clock that paces them."""
    from perflab.analysis.steps.iterations import marked_iterations

    it = marked_iterations(trace)
    if it is None:
        return None
    rows = gpu_rows(trace)
    total = float(np.nan_to_num(trace.dur[rows], nan=0.0).sum())
    coverage = float(it.work.busy_us.sum()) / total if total > 0 else 0.0
    if coverage < MIN_COVERAGE:
        return None
    start, end = it.windows
    words = (f"no ProfilerStep: {len(it)} {it.engine} iteration {_plural('marker', len(it))} "
             f"('{trace.name_of(int(it.rows[0]))}'{', ...' if len(it) > 1 else ''}), launching "
             f"{100 * coverage:.0f}% of the GPU work; {it.clock.words}")
    return Found(start.copy(), end.copy(), it.rows.copy(), "gpu" if it.clock.gpu else "ranges", words)


def _host_steps(trace: Trace) -> Found | None:
    when, work = _gpu_work(trace)
    total = float(work.sum())
    if when.size == 0 or total <= 0:
        return None
    cum = np.concatenate(([0.0], np.cumsum(work)))
    span = float(trace.end[gpu_rows(trace)].max() - when[0])
    kinds = (USER_ANNOTATION, CPU_OP, PYTHON)
    system_calls = [i for i, c in enumerate(trace.cats) if c.lower() == "os_runtime"]  # Nsight Systems' OS calls
    host = np.flatnonzero(np.isin(trace.kind, kinds) & (trace.dur > 0) & ~np.isin(trace.cat, system_calls))
    if host.size == 0:
        return None
    ok_name = np.zeros(len(trace.names), dtype=bool)
    for k in kinds:
        rows_k = host[trace.kind[host] == k]
        for n in np.unique(trace.name[rows_k]).tolist():
            ok_name[n] = ok_name[n] or _candidate_name(trace.names[n], k)
    host = host[ok_name[trace.name[host]]]
    if host.size == 0:
        return None
    # group by (name, thread); keep groups whose ranges last long enough to hold a workload
    key = trace.name[host].astype(np.int64) * (1 << 32) + (trace.tid[host].astype(np.int64) & 0xFFFFFFFF)
    order = np.lexsort((trace.ts[host], key))
    host, key = host[order], key[order]
    cuts = np.flatnonzero(np.diff(key)) + 1
    ranges, markers = [], []
    for group in np.split(host, cuts):
        if float(trace.dur[group].sum()) < MIN_SPAN_SHARE * span and group.size < MIN_ITERATIONS:
            continue
        group = group[_outermost(trace.ts[group], trace.end[group])]
        lo, hi = trace.ts[group], trace.end[group]
        inside = _launched(when, cum, lo, hi)
        coverage = float(inside.sum()) / total
        if coverage >= MIN_COVERAGE and float((hi - lo).sum()) >= MIN_SPAN_SHARE * span:
            ranges.append((group, coverage))
        elif group.size >= MIN_ITERATIONS:
            markers.append(group)
    picked = _outermost_repetition(trace, ranges, float(when[0]))
    if picked is not None:
        group, coverage = picked
        name = trace.name_of(int(group[0]))
        what = {USER_ANNOTATION: "annotation", CPU_OP: "range", PYTHON: "call"}[int(trace.kind[group[0]])]
        return Found(trace.ts[group].copy(), trace.end[group].copy(), group, "ranges",
                     f"no ProfilerStep: {group.size} {_plural(what, group.size)} '{name}', launching "
                     f"{100 * coverage:.0f}% of the GPU work")
    return _iterations(trace, markers, when, cum, total)


def _outermost_repetition(trace: Trace, ranges: list, first_launch: float) -> tuple[np.ndarray, float] | None:
    """A deliberate marker first (annotations, then record_function ranges of old traces, then Python calls);
    within one kind, the repetition not nested inside another (iterations, not their layers), then the most
    steps and the most work. When nothing of that kind repeats, a single range that launches most of the work
    is one step, unless most of it passes before the first launch (a wrapper around set-up and run): then the
    trace has no step marker and the lower kinds (layers, helper calls) are not asked."""
    for kind in (USER_ANNOTATION, CPU_OP, PYTHON):
        mine = [(g, c) for g, c in ranges if int(trace.kind[g[0]]) == kind]
        repeated = [(g, c) for g, c in mine if g.size >= 2]
        if repeated:
            top = [(g, c) for g, c in repeated if not _nested(trace, g, repeated)] or repeated
            return max(top, key=lambda gc: (gc[0].size, round(gc[1], 2)))
        if mine:
            g, c = max(mine, key=lambda gc: (gc[1], float(trace.dur[gc[0]][0])))
            prologue = max(first_launch - float(trace.ts[g[0]]), 0.0)
            return (g, c) if prologue <= MAX_PROLOGUE * float(trace.dur[g[0]]) else None
    return None


def _nested(trace: Trace, g: np.ndarray, others: list) -> bool:
    """Is the first occurrence of g inside an occurrence of another candidate?"""
    t0, t1 = float(trace.ts[g[0]]), float(trace.end[g[0]])
    for other, _c in others:
        if other is not g and ((trace.ts[other] <= t0) & (trace.end[other] >= t1) & (trace.dur[other] > t1 - t0)).any():
            return True
    return False


def _iterations(trace: Trace, markers: list, when: np.ndarray, cum: np.ndarray, total: float) -> Found | None:
    best = None
    for group in markers:
        starts = trace.ts[group]
        period = np.diff(starts)
        median = float(np.median(period))
        if median <= 0 or period.max() > MAX_PERIOD_SPREAD * median or period.min() < median / MAX_PERIOD_SPREAD:
            continue
        lo = starts
        hi = np.append(starts[1:], starts[-1] + median)
        inside = _launched(when, cum, lo, hi)
        if (inside[:-1] <= 0).any():
            continue  # an iteration that launches nothing is not an iteration of the GPU workload
        coverage = float(inside.sum()) / total
        if coverage < MIN_PERIODIC_COVERAGE:
            continue
        score = (round(coverage, 1), -group.size, coverage)  # the coarsest regular marker: iterations, not layers
        if best is None or score > best[0]:
            best = (score, group, lo, hi, coverage)
    if best is None:
        return None
    _score, group, lo, hi, coverage = best
    name = trace.name_of(int(group[0]))
    return Found(lo.copy(), hi.copy(), np.zeros(0, dtype=np.int64), "iterations",
                 f"no ProfilerStep: {group.size} iterations, each from one start of '{name}' to the next "
                 f"(period {float(np.median(np.diff(lo))) / 1e3:,.2f} ms), launching {100 * coverage:.0f}% of the GPU work")


def _plural(word: str, n: int) -> str:
    return word if n == 1 else word + "s"
