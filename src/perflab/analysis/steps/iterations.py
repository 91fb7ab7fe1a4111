"""A serving engine's iterations in a trace: one forward per scheduler step, each with its tokens and GPU time.

The iterations are the ranges an engine opens around each forward (analysis/steps/iteration_markers.py: vLLM,
SGLang, TensorRT-LLM, or `--marker`), else the repeated top-level model calls of a `generate` loop (Hugging Face's
`generate` calls the model once per token: the first call prefills the prompt, the others decode). Each
iteration carries:

- its tokens: prefill and decode, from the marker's name, else from the input shapes of its embedding lookup
  (`aten::embedding` indices [batch, length]: length > 1 prefills batch x length tokens, length 1 decodes batch);
- its GPU time on the clock that paces it (analysis/steps/gpu_clock.py): when the host runs ahead, the GPU work
  its launches made, from the end of the previous iteration's work to the end of its own.

Pure: no torch.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from perflab.analysis.idle.intervals import containing
from perflab.analysis.steps import gpu_clock
from perflab.analysis.steps.iteration_markers import Marker, engine_marker, user_marker
from perflab.trace.model import CPU_OP, PYTHON, USER_ANNOTATION, Trace

MIN_MARKED = 1        # an engine names its iterations on purpose: one is an iteration
MIN_CALLS = 2         # a model call is one only where it repeats
TOUCH_US = 1.0        # back-to-back ranges touch (float µs since the epoch): not nested
_MODEL_CALL = re.compile(r"^nn\.Module: \w*(ForCausalLM|LMHeadModel|ForConditionalGeneration)\b")
_EMBEDDING = re.compile(r"^aten::embedding$")
_MAYBE_ENGINE = re.compile(r"execute_|\[|ctx req")


@dataclass(frozen=True)
class Iterations:
    engine: str                 # "vLLM", "SGLang", "TensorRT-LLM", "marker", "model calls"
    rows: np.ndarray            # the host rows of the iteration ranges, by start
    host_start: np.ndarray
    host_end: np.ndarray
    work: gpu_clock.RangeWork
    clock: gpu_clock.Clock
    prefill_tokens: np.ndarray  # -1: unknown
    decode_tokens: np.ndarray
    prefill_requests: np.ndarray
    decode_requests: np.ndarray
    tokens_from: str            # "markers" | "input shapes" | "markers and input shapes" | ""
    shape_tokens: np.ndarray = field(default_factory=lambda: np.zeros(0))  # tokens computed, from the shapes (-1)
    prefill_square: np.ndarray = field(default_factory=lambda: np.zeros(0))  # sum of prompt tokens squared (-1)

    def __len__(self) -> int:
        return int(self.rows.size)

    @property
    def time_us(self) -> np.ndarray:
        """Each iteration's time on its clock: on the GPU's, the tiling windows; on the host's, from one range's
        start to the next's (the last: its own range, or its GPU work if that ends later)."""
        if self.clock.gpu:
            return gpu_clock.gpu_periods(self.work, self.host_start)
        nxt = np.r_[self.host_start[1:], np.nan]
        last = np.fmax(self.host_end, np.nan_to_num(self.work.gpu_end, nan=-np.inf))
        return np.where(np.isfinite(nxt), nxt, last) - self.host_start

    @property
    def windows(self) -> tuple[np.ndarray, np.ndarray]:
        """(start, end) of each iteration on its clock."""
        if self.clock.gpu:
            return gpu_clock.gpu_windows(self.work, self.host_start)
        return self.host_start, self.host_start + self.time_us

    @property
    def kinds(self) -> np.ndarray:
        """"prefill", "mixed" or "decode" per iteration (an unknown count counts as none)."""
        return np.where(self.prefill_tokens > 0, np.where(self.decode_tokens > 0, "mixed", "prefill"), "decode")

    @property
    def tokens(self) -> np.ndarray:
        known = (self.prefill_tokens >= 0) & (self.decode_tokens >= 0)
        return np.where(known, np.maximum(self.prefill_tokens, 0) + np.maximum(self.decode_tokens, 0), -1)


MARKER_KEY = "iteration_marker"   # trace.meta: the user's `--marker REGEX`, when given


def serving_iterations(trace: Trace) -> Iterations | None:
    """The trace's serving iterations (the user's marker, an engine's, else repeated model calls), or None."""
    return trace.cached("serving_iterations", lambda: _iterations(trace, calls=True))


def marked_iterations(trace: Trace) -> Iterations | None:
    """The iterations an engine's (or the user's) markers name; None without markers."""
    return trace.cached("marked_iterations", lambda: _iterations(trace, calls=False))


def _iterations(trace: Trace, calls: bool) -> Iterations | None:
    marker = trace.meta.get(MARKER_KEY)
    found = _marked(trace, user_marker(marker) if marker else engine_marker)
    if found is None and calls:
        found = _model_calls(trace) or _embedding_lookups(trace)
    if found is None:
        return None
    rows, markers, engine = found
    starts, ends = trace.ts[rows], trace.end[rows]
    if engine == EMBEDDING_CALLS:   # a forward runs from its lookup to the next one's
        ends = np.r_[starts[1:], np.nanmax(trace.end[rows])]
    tid = int(trace.tid[rows[0]])
    work = gpu_clock.range_work(trace, *gpu_clock.launch_spans(starts, ends))
    clk = gpu_clock.clock(trace, starts, ends, work, "iteration")
    pf = np.array([m.prefill_tokens for m in markers], dtype=np.int64)
    dc = np.array([m.decode_tokens for m in markers], dtype=np.int64)
    pr = np.array([m.prefill_requests for m in markers], dtype=np.int64)
    dr = np.array([m.decode_requests for m in markers], dtype=np.int64)
    from_markers = bool(((pf >= 0) & (dc >= 0)).any())
    computed = _shape_tokens(trace, starts, ends, tid)
    from_shapes = False
    unknown = (pf < 0) | (dc < 0)
    if unknown.any():
        pre, dec = computed
        fill = unknown & (pre >= 0)
        pf[fill], dc[fill] = pre[fill], dec[fill]
        pr[fill & (pr < 0)] = np.where(pre[fill & (pr < 0)] > 0, 1, 0)
        from_shapes = bool(fill.any())
    tokens_from = " and ".join(w for w, used in (("markers", from_markers), ("input shapes", from_shapes)) if used)
    shape_total = np.where(computed[0] >= 0, computed[0] + computed[1], -1)
    square = np.array([m.prefill_square for m in markers], dtype=np.int64)
    return Iterations(engine, rows, starts, ends, work, clk, pf, dc, pr, dr, tokens_from, shape_total, square)


def _marked(trace: Trace, parse: Callable[[str], Marker | None]) -> tuple[np.ndarray, list[Marker], str] | None:
    """Host ranges whose name is an iteration marker, on the thread that has most of them, outermost only."""
    parsed: dict[int, Marker] = {}
    for i, n in enumerate(trace.names):
        if parse is engine_marker and not _MAYBE_ENGINE.search(n):
            continue   # a cheap test first: the engines' patterns all hold one of these
        m = parse(n)
        if m is not None:
            parsed[i] = m
    if not parsed:
        return None
    ids = np.fromiter(parsed, dtype=np.int64)
    rows = np.flatnonzero(np.isin(trace.name, ids) & np.isin(trace.kind, (USER_ANNOTATION, CPU_OP))
                          & np.isfinite(trace.dur))
    if rows.size < MIN_MARKED:
        return None
    rows = _on_busiest_thread(trace, rows)
    rows = rows[np.lexsort((-trace.dur[rows], trace.ts[rows]))]
    reach = np.maximum.accumulate(trace.end[rows])
    rows = rows[np.r_[True, trace.ts[rows][1:] >= reach[:-1] - TOUCH_US]]   # one range per iteration: the outermost
    markers = [parsed[int(trace.name[r])] for r in rows.tolist()]
    return rows, markers, markers[0].engine


def _model_calls(trace: Trace) -> tuple[np.ndarray, list[Marker], str] | None:
    """A `generate` loop without markers: the causal LM's top-level calls (Python tracing), one per token."""
    is_call = trace.name_table_mask(lambda n: _MODEL_CALL.match(n) is not None) & (trace.kind == PYTHON)
    rows = np.flatnonzero(is_call & np.isfinite(trace.dur))
    if rows.size < MIN_CALLS:
        return None
    rows = rows[np.argsort(trace.ts[rows], kind="stable")]
    reach = np.maximum.accumulate(trace.end[rows])
    rows = rows[np.r_[True, trace.ts[rows][1:] >= reach[:-1] - TOUCH_US]]
    if rows.size < MIN_CALLS:
        return None
    return rows, [Marker("model calls")] * rows.size, "model calls"


EMBEDDING_CALLS = "forwards (embedding lookups)"


def _embedding_lookups(trace: Trace) -> tuple[np.ndarray, list[Marker], str] | None:
    """A generate loop seen only through its ops: each forward begins with one embedding lookup of [batch, length]
    token ids (the first prefills, the next ones decode), on the thread that makes most of them."""
    emb = np.flatnonzero(_lookups(trace) & np.isfinite(trace.dur))
    if emb.size < MIN_CALLS:
        return None
    emb = _on_busiest_thread(trace, emb)
    emb = emb[np.argsort(trace.ts[emb], kind="stable")]
    two_d = [r for r in emb.tolist() if len(_index_dims(trace, r) or ()) >= 2]
    if len(two_d) < MIN_CALLS or len(two_d) < 0.9 * emb.size:
        return None   # packed or one-dimensional ids: no sign of a per-token loop
    rows = np.asarray(two_d, dtype=np.int64)
    return rows, [Marker(EMBEDDING_CALLS)] * rows.size, EMBEDDING_CALLS


def _on_busiest_thread(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """The rows on the thread that holds most of them."""
    tids, counts = np.unique(trace.tid[rows], return_counts=True)
    return rows[trace.tid[rows] == tids[np.argmax(counts)]]


def _lookups(trace: Trace) -> np.ndarray:
    """Mask of the embedding lookups that recorded their input shapes."""
    return (trace.name_table_mask(lambda s: _EMBEDDING.match(s) is not None) & (trace.kind == CPU_OP)
            & (trace.shape >= 0))


def _index_dims(trace: Trace, row: int) -> list | None:
    try:
        index = json.loads(trace.shapes[int(trace.shape[row])])[1]
    except (ValueError, IndexError, TypeError):
        return None
    return index if isinstance(index, list) and index and all(isinstance(d, int) for d in index) else None


def _shape_tokens(trace: Trace, starts: np.ndarray, ends: np.ndarray, tid: int) -> tuple[np.ndarray, np.ndarray]:
    """(prefill, decode) tokens per range from its first embedding lookup's indices: [B, L] with L > 1 prefills
    B x L tokens, [B, 1] decodes B; a flat [N] (an engine's packed batch) cannot tell them apart: -1."""
    n = starts.size
    pre, dec = np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64)
    emb = np.flatnonzero(_lookups(trace) & (trace.tid == tid))
    if not emb.size:
        return pre, dec
    emb = emb[np.argsort(trace.ts[emb], kind="stable")]
    i = containing(starts, ends, trace.ts[emb])
    inside = i >= 0
    emb, i = emb[inside], i[inside]
    first = np.r_[True, i[1:] != i[:-1]] if i.size else np.zeros(0, dtype=bool)
    for row, k in zip(emb[first].tolist(), i[first].tolist()):
        index = _index_dims(trace, row)
        if index is None:
            continue
        if len(index) >= 2:
            batch, length = int(np.prod(index[:-1])), int(index[-1])
            pre[k], dec[k] = (batch * length, 0) if length > 1 else (0, batch)
    return pre, dec
