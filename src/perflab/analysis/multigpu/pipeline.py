"""Pipeline parallelism read from one rank's timeline: compute blocks bracketed by point-to-point transfers.

A pipeline stage receives activations from the previous stage (recv), computes a micro-batch, sends the
result to the next stage (send); backward runs the other way. On the GPU that is compute kernels between
NCCL SendRecv kernels (or P2P sends/receives recorded by c10d: the `send_recv` kind of
analysis/multigpu/collectives.py). Until the first micro-batch reaches a stage, and after its last one has left,
the stage has nothing to compute: the pipeline bubble. With p stages and m micro-batches a GPipe
schedule idles each stage (p-1)/(m+p-1) of the step (1F1B has the same bubble with less memory; more
micro-batches, or interleaved stages, shrink it).

Per step: the compute blocks between P2P kernels (micro-batch passes), the time with no compute kernel
running, and where it sits (before the first block, after the last, between).
"""
from __future__ import annotations

import numpy as np

from perflab.analysis.idle.intervals import length
from perflab.analysis.work.kernels import TYPES, row_types, window_gpu_rows
from perflab.analysis.steps.windows import Windows
from perflab.trace.model import KERNEL, Trace

_NOT_COMPUTE = [TYPES.index(t) for t in ("memcpy", "memset", "communication")]


def _p2p_rows(trace: Trace) -> set[int]:
    from perflab.analysis.multigpu.collectives import collective_table

    table = collective_table(trace)
    return set(table.row[table.is_kind("send_recv")].tolist())


def _backward(trace: Trace, lo: float, hi: float) -> bool:
    """Whether autograd ran in [lo, hi) on the host (then each micro-batch has a forward and a backward block)."""
    rows = np.flatnonzero((trace.ts >= lo) & (trace.ts < hi))
    return any("backward" in trace.names[i].lower() or trace.names[i].startswith("autograd::engine")
               for i in np.unique(trace.name[rows]))


def pipeline_steps(trace: Trace, windows: Windows) -> list[dict]:
    """One dict per analysed step that has P2P transfers: blocks, idle, bubble at start/end, in µs."""
    p2p = _p2p_rows(trace)
    if not p2p:
        return []
    rows = window_gpu_rows(trace, windows)
    rows = rows[trace.kind[rows] == KERNEL]
    rows = rows[np.argsort(trace.ts[rows], kind="stable")]
    types = row_types(trace, rows)
    is_p2p = np.array([int(r) in p2p for r in rows], dtype=bool)
    compute = ~np.isin(types, _NOT_COMPUTE) & ~is_p2p
    out = []
    for lo, hi in zip(windows.start.tolist(), windows.end.tolist()):
        inside = (trace.ts[rows] >= lo) & (trace.ts[rows] < hi)
        n_p2p = int((is_p2p & inside).sum())
        comp = rows[compute & inside]
        if n_p2p < 2 or comp.size == 0:
            continue
        blocks, in_block = 0, False
        for r_is_p2p, r_comp in zip(is_p2p[inside], compute[inside]):
            if r_is_p2p:
                in_block = False
            elif r_comp and not in_block:
                blocks, in_block = blocks + 1, True
        busy = length(np.clip(trace.ts[comp], lo, hi), np.clip(trace.end[comp], lo, hi))
        first, last = float(trace.ts[comp].min()), float(trace.end[comp].max())
        out.append({"step_us": hi - lo, "p2p": n_p2p, "blocks": blocks, "backward": _backward(trace, lo, hi),
                    "compute_us": busy, "idle_us": (hi - lo) - busy, "start_idle_us": max(first - lo, 0.0),
                    "end_idle_us": max(hi - last, 0.0)})
    return out


def rank_pipeline(trace: Trace, windows: Windows) -> dict | None:
    """This rank's pipeline summary over its steps, or None when it shows no pipeline (P2P-bracketed compute
    in at least half of its steps, at least two blocks per step)."""
    steps = pipeline_steps(trace, windows)
    n = max(len(windows.start), 1)
    if len(steps) * 2 < n or not steps:
        return None
    # Back-to-back ProfilerSteps merge into one window (analysis/steps/windows.py): per-step figures divide by the
    # steps the windows hold, not by the windows.
    per = max(len(windows.steps), len(windows.start)) / len(windows.start) if windows.kind == "steps" else 1.0
    n_steps = len(steps) * per
    blocks = sum(s["blocks"] for s in steps) / n_steps
    if blocks < 2:
        return None
    backward = sum(s["backward"] for s in steps) * 2 >= len(steps)
    total = sum(s["step_us"] for s in steps)
    return {"rank": trace.rank, "steps": n_steps, "blocks_per_step": blocks,
            "micro_batches": float(np.ceil(blocks / 2)) if backward else float(np.ceil(blocks)), "training": backward,
            "p2p_per_step": sum(s["p2p"] for s in steps) / n_steps,
            "step_ms": total / n_steps / 1e3, "compute_ms": sum(s["compute_us"] for s in steps) / n_steps / 1e3,
            "bubble_pct": 100.0 * sum(s["idle_us"] for s in steps) / total if total else 0.0,
            "start_idle_pct": 100.0 * sum(s["start_idle_us"] for s in steps) / total if total else 0.0,
            "end_idle_pct": 100.0 * sum(s["end_idle_us"] for s in steps) / total if total else 0.0,
            "bubble_ms_per_step": sum(s["idle_us"] for s in steps) / n_steps / 1e3}


def gpipe_bubble_pct(stages: int, micro_batches: float) -> float:
    """The idle share of each stage in a GPipe (or 1F1B) schedule: (p-1)/(m+p-1)."""
    return 100.0 * (stages - 1) / (micro_batches + stages - 1) if stages > 1 and micro_batches > 0 else 0.0
