"""Sequences of op calls whose bytes one fused kernel would not move: memory-bound ops run back to back on
one stream over a tensor of the same size (each re-reads what the previous one wrote), and the special case
of attention written out by hand (a matmul making a scores tensor, a chain over it, a matmul reading it).

An unfused chain moves sum(bytes) while one kernel doing the same work moves sum(bytes) - 2 x (the
intermediate results): each is written once and read back once. Without tensor identities in the trace the
chain is followed by size: consecutive memory-bound calls whose largest operand has the same number of
elements. Pure: a function of the trace and the op work model.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from perflab.analysis.work.op_args import DTYPE_BYTES
from perflab.analysis.work.op_work import OpGroup, OpWork
from perflab.trace.model import Trace

CHAINABLE = ("elementwise", "cast", "copy", "softmax", "norm")
MIN_CHAIN_NUMEL = 1 << 16      # below this a chain is launch-bound, not byte-bound: the launch rules see it
SAVES = 0.75                   # a chain counts when one fused kernel would move at most this share of its bytes
SIDE_WORK = 8                  # an op over 1/8 of the chain's elements or fewer is side work (a mask), skipped


@dataclass
class Chain:
    calls: list[int]                       # group index of each call, in order
    rows: list[int]                        # one kernel row per call (the first), for the evidence
    bytes: float                           # what the calls move today
    fused_bytes: float                     # what one fused kernel would move
    time_us: float
    numel: int
    attention: bool = False
    flops: float = 0.0                     # of the matmuls of a written-out attention
    path: str = "memory"
    matmul_calls: list[int] = field(default_factory=list)


def _calls(work: OpWork, trace: Trace, stream: int) -> list[tuple[int, int, float, int]]:
    """(group, first kernel row, time of the call's kernels, profiler step) per op call on one stream, in order."""
    from perflab.analysis.work.kernel_patterns import _step_of

    on = trace.stream[work.kernel_rows] == stream
    rows, ops, grp = work.kernel_rows[on], work.kernel_ops[on], work.kernel_groups[on]
    steps = _step_of(trace, rows)
    out: list[tuple[int, int, float, int]] = []
    last_op = None
    for r, o, g, st in zip(rows.tolist(), ops.tolist(), grp.tolist(), steps.tolist()):
        if o == last_op and out:
            gi, first, t, s0 = out[-1]
            out[-1] = (gi, first, t + float(trace.dur[r]), s0)
        else:
            out.append((g, r, float(trace.dur[r]), st))
        last_op = o
    return out


def _follows(g: OpGroup, numel: int) -> bool:
    """Does this call continue a chain over `numel` elements: a chainable op over that many elements, or a
    device copy (no shapes) of that many elements at a width of 1 to 8 bytes."""
    if g.family not in CHAINABLE:
        return False
    if g.dims:
        return g.largest_numel == numel
    return g.call_out_bytes in {numel * w for w in (1, 2, 4, 8)}


def _chain(groups: list[OpGroup], run: list[tuple[int, int, float]]) -> Chain:
    gs = [groups[c[0]] for c in run]
    total = sum(g.call_bytes for g in gs)
    intermediate = sum(g.call_out_bytes for g in gs[:-1])
    fused = max(total - 2 * intermediate, gs[-1].call_out_bytes, 0.0)
    return Chain(calls=[c[0] for c in run], rows=[c[1] for c in run], bytes=total, fused_bytes=fused,
                 time_us=sum(c[2] for c in run), numel=gs[0].largest_numel)


def fusable_chains(trace: Trace, work: OpWork, min_length: int = 2) -> list[Chain]:
    """Runs of >= min_length chainable calls over one tensor size (>= MIN_CHAIN_NUMEL elements), and written-out
    attention (matmul -> chain -> matmul over the chain's size), on every stream."""
    groups = work.groups
    out: list[Chain] = []
    for stream in np.unique(trace.stream[work.kernel_rows]).tolist():
        calls = _calls(work, trace, stream)
        i = 0
        while i < len(calls):
            g = groups[calls[i][0]]
            if g.family not in CHAINABLE or g.largest_numel < MIN_CHAIN_NUMEL:
                i += 1
                continue
            j, run = i + 1, [calls[i]]
            while j < len(calls) and calls[j][3] == calls[i][3]:
                nxt = groups[calls[j][0]]
                if _follows(nxt, g.largest_numel):
                    run.append(calls[j])
                elif not (nxt.family in CHAINABLE and 0 < nxt.largest_numel * SIDE_WORK <= g.largest_numel):
                    break
                j += 1
            before = groups[calls[i - 1][0]] if i > 0 and calls[i - 1][3] == calls[i][3] else None
            after = groups[calls[j][0]] if j < len(calls) and calls[j][3] == calls[i][3] else None
            # scores = q @ k^T, a chain with a softmax over them, then probs @ v: attention written out
            attention = (before is not None and after is not None and before.family == after.family == "matmul"
                         and any(groups[c[0]].family == "softmax" for c in run)
                         and before.call_out_bytes > 0 and _out_numel(before) == g.largest_numel
                         and after.largest_numel == g.largest_numel)
            if attention:
                c = _chain(groups, run)
                mm1, mm2 = calls[i - 1], calls[j]
                probs = after.largest_numel * _itemsize(after)          # mm2 reads the chain's result
                c.bytes += before.call_bytes + after.call_bytes
                # one fused attention reads q, k (mm1's inputs) and v, and writes o (mm2's other operand, output)
                c.fused_bytes = (before.call_bytes - before.call_out_bytes) + (after.call_bytes - probs)
                c.time_us += mm1[2] + mm2[2]
                c.flops = before.flops / max(before.calls, 1) + after.flops / max(after.calls, 1)
                c.path, c.attention, c.matmul_calls = before.path, True, [mm1[0], mm2[0]]
                c.rows = [mm1[1]] + c.rows + [mm2[1]]
                out.append(c)
            elif len(run) >= min_length:
                c = _chain(groups, run)
                if c.fused_bytes <= SAVES * c.bytes:   # independent ops of one size (three randn) fuse into nothing
                    out.append(c)
            i = j
    return out


def _itemsize(g: OpGroup) -> float:
    """Bytes per element of a call's first operand (a matmul writes its output in that dtype)."""
    try:
        first = json.loads(g.dtypes)[0] if g.dtypes else ""
    except (ValueError, IndexError, TypeError):
        first = ""
    return DTYPE_BYTES.get(first) or 1


def _out_numel(g: OpGroup) -> int:
    return int(round(g.call_out_bytes / _itemsize(g)))
