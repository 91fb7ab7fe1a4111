"""The work model of a trace: every GPU kernel tied to the op that launched it, and that op's work (FLOPs and
the fewest bytes it must move) from its recorded shapes and dtypes.

A kernel's External id names the innermost CPU op that launched it (with record_shapes=True that op carries
"Input Dims", "Input type" and "Concrete Inputs"). An op's GPU time is the time of every kernel it launched
inside the analysis windows. Device-to-device copies and memsets carry their bytes in the trace and are
modelled from them. Whatever the model cannot price is counted, with the reason, never dropped:
`no_shapes` (record_shapes was off), `unknown_op` (an op the model does not know), `graph_replay` (replayed from
a CUDA graph whose capture the trace does not hold, or that no capture matches: analysis/steps/graph_capture.py gives the
others the work of the op that captured them), `no_op` (launched outside the profiler's view). Pure.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field, replace

import numpy as np

from perflab.analysis.work.kernel_patterns import _op_of_kernel
from perflab.analysis.work.replay_twins import eager_twins
from perflab.analysis.work.kernels import window_gpu_rows
from perflab.analysis.steps.links import launch_of
from perflab.analysis.work.op_args import OpArgs, decode
from perflab.analysis.work.tensor_paths import tensor_paths
from perflab.analysis.steps.windows import Windows, per_windows
from perflab.analysis.work.work_formulas import (Work, attention, conv, conv_backward, is_attention, is_conv,
                                            is_conv_backward, matmul, mm_family)
from perflab.analysis.work.work_memory import memory_op
from perflab.trace.model import KERNEL, MEMCPY, MEMSET, Trace

_CUSTOM_OUT_FIRST = ("rms_norm", "fused_add_rms_norm", "silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul",
                     "rotary_embedding")


def work_of(name: str, args: OpArgs, kernel: str = "") -> Work | None:
    """The work of one op call; None when the model does not know the op."""
    namespace, _, op = name.rpartition("::")
    if namespace not in ("aten", ""):
        if op in _CUSTOM_OUT_FIRST:   # vLLM/SGLang custom ops: (out, inputs...): every tensor moves once
            ts = args.tensors()
            return Work("norm" if "norm" in op else "elementwise", 0.0, float(sum(t.nbytes for t in ts))) if ts else None
        return None
    if op.startswith(("triton_poi_", "triton_red_", "triton_per_")) and not namespace:
        # a torch.compile (Inductor) kernel recorded as an op: each tensor argument is read or written once
        ts = args.tensors()
        return Work("elementwise" if op.startswith("triton_poi_") else "reduction", 0.0,
                    float(sum(t.nbytes for t in ts))) if ts else None
    if mm_family(op):
        return matmul(op, args, kernel)
    if is_attention(op):
        return attention(op, args)
    if is_conv(op):
        return conv(op, args, kernel)
    if is_conv_backward(op):
        return conv_backward(op, args, kernel)
    return memory_op(op, args)


@dataclass
class OpGroup:
    """Calls of one op with the same arguments (one signature): their kernels, time and work."""

    name: str
    dims: str
    dtypes: str
    concrete: str
    family: str
    path: str
    calls: int = 0
    kernels: int = 0
    time_us: float = 0.0
    flops: float = 0.0
    bytes: float = 0.0
    kernel: str = ""                     # the longest kernel's name
    kernel_us: float = 0.0
    grid: int = -1                       # blocks of the longest kernel
    block: int = -1
    first_kernel_row: int = -1
    notes: list[str] = field(default_factory=list)
    weight_narrow: bool = False          # a matmul whose weight operand is narrow (weight-only quantized)
    cast_from_narrow: bool = False       # a cast whose source is narrow (fp8/int8/int4 -> wider)
    largest_numel: int = 0               # elements of its largest operand (chains are followed by it)
    call_bytes: float = 0.0              # bytes of one call, and of that what it writes
    call_out_bytes: float = 0.0
    call_aliased_bytes: float | None = None   # bytes of one call if its equal operands are one tensor
    weight_numel: int = 0                # a matmul's weight / a cast's source: elements and bytes per element
    weight_itemsize: float = 0.0
    rows: list[int] = field(default_factory=list)   # kernel rows, in time order

    def to_dict(self) -> dict:
        return {"op": self.name, "dims": self.dims, "dtypes": self.dtypes, "family": self.family, "path": self.path,
                "calls": self.calls, "kernels": self.kernels, "time_us": round(self.time_us, 3),
                "flops": self.flops, "bytes": self.bytes, "kernel": self.kernel, "grid": self.grid,
                "block": self.block, **({"notes": self.notes} if self.notes else {})}


@dataclass
class OpWork:
    groups: list[OpGroup]
    kernel_us: float                     # GPU time in the windows: kernels, device copies, memsets (not host copies)
    unmodelled: dict[str, dict]          # reason -> {"us", "kernels", "names": {name: us}}
    shapes_recorded: bool                # some op in the trace carries Input Dims
    # per modelled kernel, in time order: its row, its op call (the CPU op row; a replayed kernel: a key of its
    # replay and capturing op) and the group index
    kernel_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    kernel_ops: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    kernel_groups: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    graph_replays: dict = field(default_factory=dict)   # graph_capture.replayed_ops' stats; {} without replays

    @property
    def modelled_us(self) -> float:
        return sum(g.time_us for g in self.groups)

    @property
    def unmodelled_us(self) -> float:
        return sum(u["us"] for u in self.unmodelled.values())


def op_work(trace: Trace, windows: Windows) -> OpWork:
    return per_windows(trace, "op_work", windows, _op_work)


def _unmodelled(store: dict, reason: str, name: str, us: float, kernels: int) -> None:
    slot = store.setdefault(reason, {"us": 0.0, "kernels": 0, "names": defaultdict(float)})
    slot["us"] += us
    slot["kernels"] += kernels
    slot["names"][name] += us


def _op_work(trace: Trace, windows: Windows) -> OpWork:
    rows = window_gpu_rows(trace, windows)
    kinds = trace.kind[rows]
    kernels = rows[kinds == KERNEL]
    copies = rows[(kinds == MEMCPY) | (kinds == MEMSET)]
    unmodelled: dict[str, dict] = {}
    groups: dict[tuple, OpGroup] = {}
    decoded: dict[tuple, tuple[OpArgs | None, Work | None]] = {}
    gpu_paths = tensor_paths(trace)
    ops = _op_of_kernel(trace, kernels)
    order = np.argsort(trace.ts[kernels], kind="stable")
    kernels, ops = kernels[order], ops[order]
    dur = trace.dur
    # a CUDA-graph replay ties its kernels to the op around cudaGraphLaunch (a compiled region), not to the
    # ops that launched them at capture: they take the capturing op's work where the trace holds the capture
    # (analysis/steps/graph_capture.py), one call per replay, and stay unpriced where it does not
    ops, calls, graph_stats = _with_captures(trace, kernels, ops)
    no_op = ops < 0
    _orphans(trace, kernels[no_op], unmodelled)
    unshaped = ~no_op
    unshaped[unshaped] = trace.shape[ops[unshaped]] < 0
    _sum_by_name(trace, ops[unshaped], dur[kernels[unshaped]], unmodelled, "no_shapes")
    keep = ~no_op & ~unshaped
    kernels, ops, calls = kernels[keep], ops[keep], calls[keep]
    by_call = np.argsort(calls, kind="stable")    # each call's kernels together, in time order within it
    sorted_calls = calls[by_call]
    starts = (np.flatnonzero(np.r_[True, sorted_calls[1:] != sorted_calls[:-1]]) if calls.size
              else np.zeros(0, np.int64))
    ends = np.r_[starts[1:], calls.size]
    for a, b in zip(starts.tolist(), ends.tolist()):
        op = int(ops[by_call[a]])
        mine = kernels[by_call[a:b]]
        us = float(dur[mine].sum())
        name = trace.name_of(op)
        sid, tid, cid = int(trace.shape[op]), int(trace.dtype[op]), int(trace.concrete[op])
        longest = int(mine[np.argmax(dur[mine])])
        key = (name, sid, tid, cid)
        if key not in decoded:
            args = decode(trace.shapes[sid], trace.dtypes[tid] if tid >= 0 else "",
                          trace.concretes[cid] if cid >= 0 else "")
            work = work_of(name, args, trace.name_of(longest)) if args is not None else None
            if work is not None and work.path == "tf32" and "tf32" not in gpu_paths:
                work = replace(work, path="fp32")  # fp32 math on a GPU without TF32 tensor cores (a V100) is SIMT
            decoded[key] = (args, work)
        args, work = decoded[key]
        if work is None:
            _unmodelled(unmodelled, "unknown_op", name, us, mine.size)
            continue
        g = groups.get(key + (work.path,))
        if g is None:
            g = groups[key + (work.path,)] = OpGroup(
                name=name, dims=trace.shapes[sid], dtypes=trace.dtypes[tid] if tid >= 0 else "",
                concrete=trace.concretes[cid] if cid >= 0 else "", family=work.family, path=work.path,
                notes=list(work.notes), weight_narrow=bool(work.weight is not None and work.weight.narrow and
                                                          work.family == "matmul"),
                cast_from_narrow=bool(work.family == "cast" and work.weight is not None and work.weight.narrow),
                largest_numel=max((t.numel for t in args.tensors()), default=0), first_kernel_row=int(mine[0]),
                call_bytes=work.bytes, call_out_bytes=work.out_bytes, call_aliased_bytes=work.aliased_bytes,
                weight_numel=work.weight.numel if work.weight is not None else 0,
                weight_itemsize=(work.weight.itemsize or 1) if work.weight is not None else 0.0)
        g.calls += 1
        g.kernels += int(mine.size)
        g.time_us += us
        g.flops += work.flops
        g.bytes += work.bytes
        g.rows.extend(mine.tolist())
        if dur[longest] > g.kernel_us:
            g.kernel, g.kernel_us = trace.name_of(longest), float(dur[longest])
            g.grid, g.block = int(trace.grid[longest]), int(trace.block[longest])
    host_link = _host_copies(trace, copies)
    device_copies = copies[~np.isin(copies, host_link)]
    for r, name_id, nbytes, us, kind in zip(device_copies.tolist(), trace.name[device_copies].tolist(),
                                            trace.nbytes[device_copies].tolist(), trace.dur[device_copies].tolist(),
                                            trace.kind[device_copies].tolist()):
        _copy_group(r, trace.names[name_id], float(nbytes), float(us), kind == MEMCPY, groups, unmodelled)
    total = float(dur[rows].sum() - dur[host_link].sum()) if rows.size else 0.0
    shaped = bool((trace.shape >= 0).any())
    for slot in unmodelled.values():
        slot["names"] = dict(sorted(slot["names"].items(), key=lambda kv: -kv[1])[:8])
    ordered = sorted(groups.values(), key=lambda g: -g.time_us)
    k_rows, k_groups = [], []
    for i, g in enumerate(ordered):
        k_rows.extend(g.rows)
        k_groups.extend([i] * len(g.rows))
    k_rows_a = np.asarray(k_rows, dtype=np.int64)
    k_groups_a = np.asarray(k_groups, dtype=np.int64)
    by_time = np.argsort(trace.ts[k_rows_a], kind="stable") if k_rows_a.size else k_rows_a
    k_rows_a, k_groups_a = k_rows_a[by_time], k_groups_a[by_time]
    op_of = dict(zip(kernels.tolist(), calls.tolist()))
    k_ops = np.array([op_of.get(r, -1 - r) for r in k_rows_a.tolist()], dtype=np.int64)  # copies: a call each
    return OpWork(groups=ordered, kernel_us=total, unmodelled=unmodelled, shapes_recorded=shaped,
                  kernel_rows=k_rows_a, kernel_ops=k_ops, kernel_groups=k_groups_a, graph_replays=graph_stats)


def _with_captures(trace: Trace, kernels: np.ndarray, ops: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict]:
    """Each kernel's op and call: a replayed kernel's op is the one that captured it (-1 without a capture) and
    its call a key of (replay, op), past every row number; any other kernel's call is its op's row."""
    replayed = _replayed(trace, kernels)
    ops = ops.copy()
    calls = ops.copy()
    if not replayed.any():
        return ops, calls, {}
    from perflab.analysis.steps.graph_capture import replayed_ops

    match = replayed_ops(trace, kernels[replayed])
    ops[replayed] = match.ops
    calls[replayed] = np.where(match.ops >= 0, len(trace) * (match.replays + 1) + match.ops, -1)
    # what no capture prices, the same kernel launched eagerly may (analysis/work/replay_twins.py): one call per
    # replay (its cudaGraphLaunch) and op
    left = np.flatnonzero(replayed)[match.ops < 0]
    twins = eager_twins(trace, kernels[left])
    found = twins >= 0
    if found.any():
        launch = launch_of(trace)[kernels[left[found]]]
        ops[left[found]] = twins[found]
        calls[left[found]] = len(trace) * (len(trace) + 1 + launch) + twins[found]
    stats = {**match.stats, "priced_by_eager_twin": int(found.sum())}
    return ops, calls, stats


def _orphans(trace: Trace, rows: np.ndarray, unmodelled: dict) -> None:
    """Kernels tied to no op: launched by a CUDA-graph replay, or by no op the trace recorded (summed per name)."""
    if not rows.size:
        return
    replay = _replayed(trace, rows)
    for why, mask in (("graph_replay", replay), ("no_op", ~replay)):
        _sum_by_name(trace, rows[mask], trace.dur[rows[mask]], unmodelled, why)


def _replayed(trace: Trace, rows: np.ndarray) -> np.ndarray:
    by = launch_of(trace)[rows]
    out = np.zeros(rows.size, dtype=bool)
    out[by >= 0] = trace.name_table_mask(lambda n: "GraphLaunch" in n)[by[by >= 0]]
    return out


def _sum_by_name(trace: Trace, rows: np.ndarray, us: np.ndarray, unmodelled: dict, why: str) -> None:
    """Kernel time summed per name of the row each kernel maps to (kernels counted, not the rows)."""
    if not rows.size:
        return
    ids, inverse = np.unique(trace.name[rows], return_inverse=True)
    total = np.bincount(inverse, weights=us)
    count = np.bincount(inverse)
    for i, t, c in zip(ids.tolist(), total.tolist(), count.tolist()):
        _unmodelled(unmodelled, why, trace.names[i], float(t), int(c))


def _host_copies(trace: Trace, copies: np.ndarray) -> np.ndarray:
    """Host<->device copies among the copy rows: they travel over the host link, outside the device's work."""
    from perflab.analysis.idle.memcpy import direction

    memcpy = copies[trace.kind[copies] == MEMCPY]
    ids = np.unique(trace.name[memcpy])
    over_link = ids[[direction(trace.names[i]) != "d2d" for i in ids.tolist()]] if ids.size else ids
    return memcpy[np.isin(trace.name[memcpy], over_link)]


def _copy_group(r: int, name: str, nbytes: float, us: float, memcpy: bool, groups: dict, unmodelled: dict) -> None:
    """A memcpy/memset row (`r`, with its name, bytes and µs): device-side bytes (D2D reads and writes them) from the
    trace's own byte count. Host<->device copies travel over the host link, not device memory: the copy rules judge
    them (the caller leaves them out)."""
    if not math.isfinite(nbytes) or nbytes < 0:
        _unmodelled(unmodelled, "no_bytes", name, us, 1)
        return
    moved = nbytes * (2.0 if memcpy else 1.0)
    key = (name, -1, -1, nbytes, "memory")   # one group per copy size: a chain follows copies by their bytes
    g = groups.get(key)
    if g is None:
        g = groups[key] = OpGroup(name=name, dims="", dtypes="", concrete="", family="copy", path="memory",
                                  first_kernel_row=r, call_bytes=moved, call_out_bytes=nbytes)
    g.calls += 1
    g.kernels += 1
    g.time_us += us
    g.bytes += moved
    g.rows.append(r)
    if us > g.kernel_us:
        g.kernel, g.kernel_us = name, us
