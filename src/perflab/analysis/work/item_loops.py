"""Loops over work items in a step, and what batching them would leave.

A Python loop over the pieces of one tensor (`for x in t`, `t.split(1)`, `t[r:r + b]`) records one view call per
piece (aten::select / aten::slice / aten::narrow with its dimension and start in "Concrete Inputs") and then the
same ops on every piece: each op group (one signature, analysis/work/op_work.py) is called a whole multiple of the
piece count per step. Such a loop is an item loop when the pieces tile most of their parent along one dimension
and a looped op takes a piece as its activation operand (the data it transforms, not a weight it is multiplied
with): a layer loop over a stacked weight or cache takes its pieces as weights and stays out.

Batched, each looped group runs once per step over all items: the same FLOPs; a matmul reads its weight once
instead of once per item; everything else keeps its bytes. Its time at the roof (max of FLOPs over the path's
ceiling and bytes over DRAM bandwidth) replaces the loop's time; the other ops keep theirs. Pure.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from perflab.analysis.work.ceilings import DeviceCeilings
from perflab.analysis.work.op_args import OpArgs, decode
from perflab.analysis.work.op_work import OpGroup, OpWork
from perflab.trace.model import CPU_OP, Trace

MIN_ITEMS = 8            # fewer pieces than this is a split (q, k, v), not a loop over items
TILED_SHARE = 0.5        # the pieces cover at least this share of their parent along the dimension
MULTIPLE_SLACK = 0.05    # calls per step within 5 % of a whole multiple of the item count
_VIEWS = ("aten::select", "aten::slice", "aten::narrow")
_ACTIVATION_AT = {"aten::addmm": 1, "aten::baddbmm": 1, "aten::addbmm": 1}   # (bias, input, weight); others: first


@dataclass
class ItemLoop:
    items: int                    # pieces per step
    view: str                     # the view op that carves them
    parent: tuple[int, ...]       # the carved tensor's shape
    dim: int
    piece: tuple[int, ...]        # one piece's shape
    looped: list[int]             # indices into OpWork.groups: the groups the loop runs per item

    def to_dict(self, work: OpWork) -> dict:
        return {"items_per_step": self.items, "item_view": self.view, "item_parent": list(self.parent),
                "item_dim": self.dim, "item_shape": list(self.piece),
                "looped_ops": sorted({work.groups[i].name for i in self.looped})}


def _int(args: OpArgs, i: int) -> int | None:
    """Argument i as a plain int from the Concrete Inputs; None where absent or anything else."""
    try:
        v = json.loads(args.scalar(i) or "")
    except ValueError:
        return None
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _pieces(trace: Trace, rows: np.ndarray) -> dict[tuple, set[tuple[int, int]]]:
    """(view op, parent shape, dim) -> the distinct (start, length) pieces its calls carve."""
    names = trace.name_table_mask(lambda n: n in _VIEWS)
    rows = rows[names[trace.name[rows]] & (trace.shape[rows] >= 0) & (trace.concrete[rows] >= 0)]
    out: dict[tuple, set[tuple[int, int]]] = {}
    calls = np.stack([trace.name[rows], trace.shape[rows], trace.concrete[rows]], axis=1).astype(np.int64)
    for name_id, sid, cid in (np.unique(calls, axis=0).tolist() if rows.size else []):
        name = trace.names[name_id]
        args = decode(trace.shapes[sid], "", trace.concretes[cid])
        parent = args.tensor(0) if args is not None else None
        if parent is None or not parent.sizes:
            continue
        dim, start = _int(args, 1), _int(args, 2)
        if dim is None or start is None or not -len(parent.sizes) <= dim < len(parent.sizes):
            continue
        dim %= len(parent.sizes)
        if name == "aten::select":
            length = 0                                   # the dimension goes
        elif name == "aten::narrow":
            length = _int(args, 3) or 0
        else:
            end = _int(args, 3)
            length = (min(end, parent.sizes[dim]) - start) if end is not None else 0
        if name != "aten::select" and length <= 0:
            continue
        out.setdefault((name, parent.sizes, dim), set()).add((start % max(parent.sizes[dim], 1), length))
    return out


def _activation(g: OpGroup) -> tuple[int, ...] | None:
    args = decode(g.dims, g.dtypes, g.concrete)
    t = args.tensor(_ACTIVATION_AT.get(g.name, 0)) if args is not None else None
    return t.sizes if t is not None else None


def item_loop(trace: Trace, host_rows: np.ndarray, work: OpWork, steps: int) -> ItemLoop | None:
    """The step's loop over items (the largest one), or None where the trace shows none (no shapes, no views)."""
    if steps <= 0 or not work.groups:
        return None
    rows = host_rows[trace.kind[host_rows] == CPU_OP]
    best = None
    for (view, parent, dim), pieces in _pieces(trace, rows).items():
        items = len(pieces)
        lengths = {length for _, length in pieces}
        if items < MIN_ITEMS or len(lengths) != 1:
            continue
        length = lengths.pop()
        if items * max(length, 1) < TILED_SHARE * parent[dim]:
            continue
        piece = parent[:dim] + parent[dim + 1:] if view == "aten::select" else (
            parent[:dim] + (length,) + parent[dim + 1:])
        looped = []
        for i, g in enumerate(work.groups):
            per_step = g.calls / steps
            k = round(per_step / items)
            if k >= 1 and abs(per_step - k * items) <= MULTIPLE_SLACK * k * items:
                looped.append(i)
        if not any(_activation(work.groups[i]) == piece for i in looped):
            continue
        if best is None or items > best.items:
            best = ItemLoop(items, view, parent, dim, piece, looped)
    return best


def batched_us(g: OpGroup, c: DeviceCeilings, steps: int) -> float | None:
    """Per step, a looped group run once over all items at the roof; None without the ceilings it needs."""
    if not c.dram:
        return None
    weight = g.weight_numel * g.weight_itemsize if g.family == "matmul" else 0.0
    nbytes = max(g.bytes - (g.calls - steps) * weight, 0.0)
    roof, _ = c.flops_roof(g.path) if g.path != "memory" else (None, "")
    if g.path != "memory" and g.flops and not roof:
        return None
    return max(nbytes / c.dram, g.flops / roof if roof else 0.0) * 1e6 / steps
