"""Compile work in a trace: torch.compile (Dynamo, AOTAutograd, Inductor), Triton compiles and autotuning, CUDA
graph capture. None of it is steady state: a window that holds it measures a one-time cost, not the program.

torch.profiler records Dynamo's and Inductor's compile phases as host ranges: every `dynamo_timed` phase as
`NAME (dynamo_timed)` (with a `NAME_data: compile_id=...` annotation beside it), the whole compile as `dynamo`,
`entire_frame_compile`, `compile_attempt_N`, `backend_compile` (`OutputGraph.call_user_compiler`); Inductor's
runtime autotuning as `CachingAutotuner.benchmark_all_configs`, its kernel loading as
`StaticAutotunerFuture.warm_precompile`, `async_compile.wait`, `PyCodeCache.load_by_key_path`. Triton's own
compiler and benchmark calls appear as Python frames (with_stack). A CUDA graph capture shows as the runtime
calls that begin and end it and instantiate the graph.

What compiled code leaves at run time is told apart: `Torch-Compiled Region: F/N` (a call of compiled code),
`TorchDynamo Cache Lookup` (its guards), `## Call CompiledFxGraph ... ##`, `CompiledFunction` (AOTAutograd's
runtime wrapper) and `cudaGraphLaunch` (a graph replay) mark steady-state execution. Pure: no torch.
"""
from __future__ import annotations

import re
from collections import Counter

import numpy as np

from perflab.analysis.idle.intervals import intersect, length, merge
from perflab.trace.model import HOST_KINDS, RUNTIME, Trace

_COMPILE = re.compile(
    r"\(dynamo_timed\)\s*$|_data: .*compile_id=|^dynamo$|^entire_frame_compile$|^compile_attempt_\d+$"
    r"|^backend_compile$|^inductor_compile$|OutputGraph\.call_user_compiler|^_compile\.compile_inner"
    r"|^CachingAutotuner\.|^StaticAutotunerFuture\.|^async_compile\.wait$|^AlgorithmSelectorCache\."
    r"|^select_algorithm|^PyCodeCache\.|^TritonBundler\.|^AOTAutogradCache\.|^FxGraphCache\."
    r"|^inductor_codecache|^compile_fx|^fx_codegen_and_compile|^create_aot_dispatcher_function"
    r"|triton[/\\]compiler[/\\]compiler\.py.*\bcompile\b|triton[/\\]runtime[/\\]autotuner\.py"
    r"|triton[/\\]testing\.py.*\bdo_bench|\bbenchmark_all_configs\b|torch[/\\]_dynamo[/\\]convert_frame\.py")
_CAPTURE = re.compile(r"^(cuda|cu|hip)(StreamBeginCapture|StreamEndCapture|GraphInstantiate)\w*$")
_COMPILED_RUN = re.compile(r"^Torch-Compiled Region|^## Call CompiledFxGraph|^CompiledFunction$")
_GRAPH_LAUNCH = re.compile(r"^(cuda|cu|hip)GraphLaunch\w*$")
# A window this share of compile work is compilation, not the program: nothing in it is steady state.
MOSTLY_PCT = 50.0
RECORD_AFTER_COMPILE = (
    "Record after compilation: `perflab profile -- CMD` waits until compilation and graph capture are done before "
    "it counts steps; with torch.profiler, run the compiled code a few times before the profiler's active steps "
    "(schedule(wait=..., warmup=...)), and keep shapes static so it does not compile again.")


def is_compile_work(name: str) -> bool:
    return _COMPILE.search(name.strip()) is not None


def is_graph_capture(name: str) -> bool:
    return _CAPTURE.match(name.strip()) is not None


def _short(name: str) -> str:
    return re.sub(r"\s*\(dynamo_timed\)\s*$", "", name.strip())


def compile_work_rows(trace: Trace) -> np.ndarray:
    """The host ranges of compile work (Dynamo, AOT autograd, Inductor phases) that have a duration, in row order;
    kept on the trace (the compile share and the recompilation rule's steady-state cost both read them)."""
    def find() -> np.ndarray:
        host = np.isin(trace.kind, HOST_KINDS)
        return np.flatnonzero(host & trace.name_table_mask(is_compile_work) & np.isfinite(trace.dur))
    return trace.cached("compile_work_rows", find)


def compile_work(trace: Trace, windows=None) -> dict:
    """How much of the window (analysis.steps.windows.Windows, default: the whole trace) is compile work.

    Keys: compile_us and window_us (the union of compile ranges and graph captures inside the window, and the
    window's length), share_pct, names (the compile phases holding most time, longest first), graph_captures
    (capture/instantiate calls), compiled_calls (calls of compiled code: the program is compiled), graph_replays,
    mostly_compile (share_pct >= MOSTLY_PCT) and summary (one sentence, None when the window holds no compile
    work).
    """
    host = np.isin(trace.kind, HOST_KINDS)
    work = np.zeros(len(trace), dtype=bool)
    work[compile_work_rows(trace)] = True
    capture = (trace.kind == RUNTIME) & trace.name_table_mask(is_graph_capture)
    rows = np.flatnonzero((work | capture) & np.isfinite(trace.dur))
    if windows is None:
        lo, hi = (float(trace.ts.min()), float(np.nanmax(trace.end))) if len(trace) else (0.0, 0.0)
        win = (np.array([lo]), np.array([hi]))
    else:
        win = (np.asarray(windows.start, dtype=np.float64), np.asarray(windows.end, dtype=np.float64))
    window_us = length(*win)
    inside = intersect(merge(trace.ts[rows], trace.end[rows]), win) if rows.size else (np.zeros(0), np.zeros(0))
    compile_us = length(*inside) if rows.size else 0.0
    in_window = rows[_overlaps(trace.ts[rows], trace.end[rows], win)] if rows.size else rows
    per_name: Counter = Counter()
    for r in in_window.tolist():
        if work[r]:
            per_name[_short(trace.name_of(r))] += float(trace.dur[r])
    share = 100.0 * compile_us / window_us if window_us > 0 else 0.0
    steps_with, steps_pct, holding = _steps_holding(trace, windows, rows)
    starts = _compile_starts(trace, rows)
    _, _, starting = _steps_holding(trace, windows, starts) if starts.size else (0, 0.0, np.zeros(0, dtype=bool))
    recurring = _recurs(starting)   # new compiles begin in most steps: one long compile spans steps, not this
    captures = int(np.count_nonzero(capture[in_window])) if in_window.size else 0
    compiled_calls = int(np.count_nonzero(host & trace.name_table_mask(lambda n: _COMPILED_RUN.match(n) is not None)))
    replays = int(np.count_nonzero((trace.kind == RUNTIME) & trace.name_table_mask(
        lambda n: _GRAPH_LAUNCH.match(n.strip()) is not None)))
    names = [n for n, _ in per_name.most_common(6)]
    summary = None
    if compile_us > 0:
        what = ", ".join(names[:3]) if names else "CUDA graph capture"
        summary = (f"{share:.0f}% of the analysed window ({compile_us / 1e3:,.1f} ms of {window_us / 1e3:,.1f} ms) is "
                   f"compile work ({what}"
                   + (f"; {captures} CUDA graph capture call(s)" if captures and names else "")
                   + ")" + (f", and the {steps_with} step(s) that hold it take {steps_pct:.0f}% of the window"
                            if steps_with else "")
                   + (f": it comes back in {steps_with} of {holding.size} steps, so it is the program's steady state "
                      "(recompilation), not a one-time cost" if recurring else
                      ": a one-time cost, not the program's steady state"))
    ids = compile_ids(trace, in_window)
    return {"compile_us": round(compile_us, 3), "window_us": round(window_us, 3), "share_pct": round(share, 2),
            "steps_with_compile": steps_with, "steps_with_compile_pct": round(steps_pct, 2),
            "steps": int(holding.size), "recurring": recurring, "compile_ids": ids,
            "names": names, "graph_captures": captures, "compiled_calls": compiled_calls, "graph_replays": replays,
            "mostly_compile": max(share, steps_pct) >= MOSTLY_PCT and not recurring, "summary": summary}


_COMPILE_ID = re.compile(r"compile_id=(\d+/\d+)|^Torch-Compiled Region: (\d+/\d+)")
RECUR_MIN_STEPS = 3


_STARTS = re.compile(r"^dynamo$|^_compile\.compile_inner|^entire_frame_compile$")


def _compile_starts(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """The first row of each compile among the compile rows: each compile id's first `_data` annotation, else (no
    ids recorded) each top-level compile range, as zero-length rows at their start."""
    first = _first_by_id(trace, rows[np.argsort(trace.ts[rows], kind="stable")])
    if first:
        return np.fromiter(first.values(), dtype=np.int64)
    top = trace.name_table_mask(lambda n: _STARTS.match(n.strip()) is not None)
    return rows[top[rows]]


def _recurs(holding: np.ndarray) -> bool:
    """New compiles in most steps, the later half included: the program compiles again and again."""
    if holding.size < RECUR_MIN_STEPS or holding.sum() < RECUR_MIN_STEPS:
        return False
    return bool(holding.mean() >= 0.5 and holding[holding.size // 2:].mean() >= 0.5)


def compile_ids(trace: Trace, rows: np.ndarray) -> list[str]:
    """Dynamo's compile ids (frame/recompile, as `0/3`) that the rows name, in order of first appearance."""
    return list(_first_by_id(trace, rows))


def _first_by_id(trace: Trace, rows: np.ndarray) -> dict[str, int]:
    """Each compile id the rows name, with the first of the rows (in the order given) that names it."""
    first: dict[str, int] = {}
    for r in rows.tolist():
        m = _COMPILE_ID.search(trace.name_of(r).strip())
        if m:
            first.setdefault(m.group(1) or m.group(2), r)
    return first


def _steps_holding(trace: Trace, windows, rows: np.ndarray) -> tuple[int, float]:
    """How many of the window's steps hold compile work (`rows`), their share of the steps' time (the rest of such a
    step, imports and Python no range names, is compile-time work as well), and which steps hold it."""
    none = np.zeros(0, dtype=bool)
    if windows is None or windows.kind != "steps":
        return 0, 0.0, none
    from perflab.analysis.steps.windows import profiler_steps

    steps = profiler_steps(trace)
    keep = np.isin(steps.number, np.asarray(windows.steps, dtype=np.int64))
    start, end = steps.launch_start[keep], steps.launch_end[keep]   # compile work runs on the host
    total = float((end - start).sum())
    if total <= 0 or rows.size == 0:
        return 0, 0.0, np.zeros(start.size, dtype=bool)
    r0, r1 = trace.ts[rows], trace.end[rows]
    holds = np.array([bool(np.any((r0 < e) & (r1 > b))) for b, e in zip(start.tolist(), end.tolist())], dtype=bool)
    return int(holds.sum()), 100.0 * float((end - start)[holds].sum()) / total, holds


def _overlaps(starts: np.ndarray, ends: np.ndarray, win: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Boolean per range: it overlaps some window."""
    w0, w1 = win
    i = np.searchsorted(w0, ends, side="left") - 1  # last window starting before the range ends
    ok = i >= 0
    return ok & (w1[np.maximum(i, 0)] > starts)
