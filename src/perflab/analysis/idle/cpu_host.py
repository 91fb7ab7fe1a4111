"""Where a CPU-only step's time goes: torch ops, DataLoader iteration, or Python between them.

On a trace without a GPU there is no device timeline to find idle gaps in; the CPU *is* the device.
The analogue of "the GPU waits for the host" is then "the step thread is not running tensor ops":
inside the analysis windows, on the thread that runs the steps, each moment is

- dataloader: inside DataLoader iteration (its `enumerate(DataLoader)#...__next__` range), ops
  included (collate, transforms);
- ops: inside a torch operator (cpu_op) outside the DataLoader: the model's arithmetic;
- comm: neither, while a collective is in flight on any thread (a `gloo:all_reduce`/`nccl:*` range,
  a `record_param_comms` or `c10d::` op; gloo runs them on worker threads): the step waits for
  communication that no compute hides;
- wait: none of these, blocked in a wait (select/poll, a queue or lock, a future, a sleep; analysis.idle.waits):
  waiting for another thread or process, not computing;
- python: none of these: interpreter time around the ops, split by the length of each stretch between
  two ops: ``host`` (a stretch of at least LONG_PYTHON_US: featurizing in Python loops, building
  tensors from lists) and ``dispatch`` (shorter stretches: the eager path's own overhead between
  many small ops; on a GPU that would be launch overhead, not host compute). The threshold is the
  GPU doctor's (analysis.idle.gaps.LAUNCH_GAP_MAX_US): launching one op never takes that long.

Besides the shares of the whole analysed span (`pct`), `typical_pct` is the median over the steps of
each step's shares: one step stretched by the OS (a preempted thread on a busy machine shows up as
a long stretch of "python") does not decide the verdict. With Python stacks recorded (with_stack),
the python frames covering most of the "python" time are listed too. Pure: no torch.
"""
from __future__ import annotations

import re

import numpy as np

from perflab.analysis.idle.host import dataloader
from perflab.analysis.idle.intervals import Coverage, complement, difference, intersect, merge
from perflab.analysis.idle.waits import waiting
from perflab.analysis.steps.windows import Windows, per_windows, profiler_steps
from perflab.trace.model import CPU_OP, PYTHON, STEP_RE, USER_ANNOTATION, Trace

TOP_FRAMES = 5
LONG_PYTHON_US = 200.0
_SOURCE_FRAME = re.compile(r"^(.*\.py)\((\d+)\): (.+)$")
_COMM = re.compile(r"^(gloo|nccl|mpi|ucc):|^record_param_comms$|^c10d::")


def step_thread(trace: Trace) -> int:
    """The thread that holds the ProfilerStep ranges, else the one with the most operator (else Python) time."""
    is_step = trace.name_table_mask(lambda n: STEP_RE.fullmatch(n.strip()) is not None)
    rows = np.flatnonzero(is_step & np.isin(trace.kind, (USER_ANNOTATION, CPU_OP)))
    if rows.size == 0:
        rows = np.flatnonzero(trace.kind == CPU_OP)
    if rows.size == 0:  # no operators at all (a Python-only process): the thread with the most recorded time
        rows = np.flatnonzero(np.isin(trace.kind, (PYTHON, USER_ANNOTATION)))
    if rows.size == 0:
        return -1
    tids, inv = np.unique(trace.tid[rows], return_inverse=True)
    return int(tids[np.bincount(inv, weights=trace.dur[rows]).argmax()])


def cpu_time_split(trace: Trace, windows: Windows) -> dict:
    return per_windows(trace, "cpu_time_split", windows, _split)


def _split(trace: Trace, windows: Windows) -> dict:
    tid = step_thread(trace)
    win = (windows.start, windows.end)
    total = float((windows.end - windows.start).sum())
    ops = np.flatnonzero((trace.kind == CPU_OP) & (trace.tid == tid) & (trace.dur > 0)
                         & ~trace.name_table_mask(lambda n: STEP_RE.fullmatch(n.strip()) is not None))
    loader = dataloader(trace)
    loader_in = intersect(win, (loader.s, loader.e))
    # collectives on any thread (gloo and async NCCL run them on worker threads): time the step thread
    # spends neither in the DataLoader nor in an op while one is in flight is time it waits for them
    comm_rows = np.flatnonzero(np.isin(trace.kind, (USER_ANNOTATION, CPU_OP)) & (trace.dur > 0)
                               & trace.name_table_mask(lambda n: _COMM.match(n.strip()) is not None))
    comm = merge(trace.ts[comm_rows], trace.end[comm_rows])
    ops_in = intersect(win, difference((trace.ts[ops], trace.end[ops]), (loader.s, loader.e)))
    comm_in = intersect(win, difference(comm, merge(np.concatenate((loader.s, ops_in[0])),
                                                    np.concatenate((loader.e, ops_in[1])))))
    busy = merge(np.concatenate((loader_in[0], comm_in[0], ops_in[0])),
                 np.concatenate((loader_in[1], comm_in[1], ops_in[1])))
    blocked = waiting(trace, tid)  # select/poll, queue and lock waits, sleeps: the thread is not computing
    wait_in = intersect(win, difference((blocked.s, blocked.e), busy))
    idle = merge(np.concatenate((busy[0], wait_in[0])), np.concatenate((busy[1], wait_in[1])))
    python = intersect(win, complement(idle[0], idle[1], windows.lo, windows.hi)) if total > 0 else idle
    long = (python[1] - python[0]) >= LONG_PYTHON_US
    us = {"dataloader": _len(loader_in), "comm": _len(comm_in), "ops": _len(ops_in), "wait": _len(wait_in),
          "python": _len(python), "host": _len((python[0][long], python[1][long])),
          "dispatch": _len((python[0][~long], python[1][~long]))}
    pct = {k: (100.0 * v / total if total > 0 else 0.0) for k, v in us.items()}
    parts = {"dataloader": loader_in, "comm": comm_in, "ops": ops_in, "wait": wait_in, "python": python,
             "host": (python[0][long], python[1][long]), "dispatch": (python[0][~long], python[1][~long])}
    names = trace.name[comm_rows]
    by_name = np.bincount(names, weights=trace.dur[comm_rows]) if names.size else np.zeros(0)
    comm_ops = [trace.names[int(k)] for k in np.argsort(-by_name, kind="stable")[:3] if by_name[k] > 0]
    return {"thread": tid, "window_us": total, "steps": len(windows.steps), "us": us, "pct": pct, "comm_ops": comm_ops,
            "typical_pct": _typical(trace, windows, parts, pct), "top_python_frames": _frames(trace, tid, python)}


def _typical(trace: Trace, windows: Windows, parts: dict, pct: dict) -> dict:
    """Median over the analysed steps of each step's percentages (the whole-span ones with < 3 steps)."""
    steps = profiler_steps(trace)
    keep = np.isin(steps.number, np.asarray(windows.steps, dtype=np.int64))
    lo, hi = steps.start[keep], steps.end[keep]
    if lo.size < 3:
        return dict(pct)
    span = np.maximum(hi - lo, 1e-9)
    return {k: float(np.median(100.0 * Coverage(*iv).covered(lo, hi) / span)) for k, iv in parts.items()}


def _len(iv: tuple[np.ndarray, np.ndarray]) -> float:
    return float((iv[1] - iv[0]).sum())


def source_frame(name: str) -> str | None:
    """'pkg/workload.py(54): relative_distances' -> 'workload.py:relative_distances'; None for a builtin."""
    m = _SOURCE_FRAME.match(name.strip())
    return f"{m.group(1).replace(chr(92), '/').rsplit('/', 1)[-1]}:{m.group(3)}" if m else None


def _frames(trace: Trace, tid: int, python: tuple[np.ndarray, np.ndarray]) -> list[dict]:
    """Innermost Python source frames (with_stack traces) by the python time they cover, most first.

    Builtin calls (`<built-in method ...>`) are not frames of their own here: their time stays with
    the Python function that called them (torch.tensor(a_big_list) is its caller's cost).
    """
    rows = np.flatnonzero((trace.kind == PYTHON) & (trace.tid == tid) & (trace.dur > 0)
                          & trace.name_table_mask(lambda n: _SOURCE_FRAME.match(n.strip()) is not None))
    if rows.size == 0 or python[0].size == 0:
        return []
    amount = Coverage(*python).covered(trace.ts[rows], trace.end[rows])
    order = np.lexsort((-trace.dur[rows], trace.ts[rows]))     # parents before their children
    rows, amount = rows[order], amount[order]
    own = amount.copy()
    stack: list[int] = []
    for i in range(rows.size):
        while stack and trace.end[rows[stack[-1]]] <= trace.ts[rows[i]]:
            stack.pop()
        if stack:
            own[stack[-1]] -= amount[i]
        stack.append(i)
    per_name = np.bincount(trace.name[rows], weights=np.maximum(own, 0.0))
    best = np.argsort(-per_name, kind="stable")[:TOP_FRAMES]
    return [{"name": trace.names[int(k)], "where": source_frame(trace.names[int(k)]), "python_us": float(per_name[k])}
            for k in best if per_name[k] > 0]
