"""Which kernels are worth a closer look (Nsight Compute): ranked by the time they would save, not their time.

A kernel's saving is its share of the gap between its ops' actual GPU time and their speed-of-light time
(analysis/work/speed_of_light.py): each op group's gap is split over the kernels it launched in proportion to their
time, and summed per kernel name. A kernel far below its roof ranks above a longer one that runs at it. Kernels
no op model prices (a custom CUDA or Triton kernel launched outside any known op) have no speed of light: their
whole time is the most they could save, and they rank by that bound, labelled so. Memcpy and memset rows are no
kernels ncu can profile and are left out. Pure.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from perflab.analysis.work.ceilings import DeviceCeilings
from perflab.analysis.work.kernels import window_gpu_rows
from perflab.analysis.ncu.ncu_plan import function_name, steady_launch
from perflab.analysis.work.op_work import OpWork
from perflab.analysis.work.speed_of_light import op_sol
from perflab.analysis.steps.windows import Windows
from perflab.trace.model import KERNEL, Trace

SOL = "speed of light"
TIME = "time (no speed of light: an upper bound)"


@dataclass
class KernelTarget:
    kernel: str                      # full name, as the trace has it
    function: str                    # the name ncu's --kernel-name matches
    gain_us: float                   # per step: actual minus speed of light (basis SOL), or the whole time (TIME)
    time_us: float                   # GPU time per step
    sol_us: float | None             # speed-of-light time per step of its priced launches (None: not modelled)
    gain_pct: float                  # gain_us as a share of the step time
    basis: str
    launches_per_step: float
    row: int                         # the launch chosen for ncu (a kernel row of the trace)
    ops: list[dict] = field(default_factory=list)   # the op groups that launch it: op, dims, gap_us, bound
    priced_us: float = 0.0           # per step: the time of its launches an op model prices (basis SOL)

    @property
    def pct_of_roof(self) -> float | None:
        return 100.0 * self.sol_us / self.priced_us if self.sol_us is not None and self.priced_us > 0 else None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["pct_of_roof"] = self.pct_of_roof
        return d


def kernel_targets(trace: Trace, windows: Windows, work: OpWork, ceilings: DeviceCeilings, *, steps: int,
                   step_us: float) -> list[KernelTarget]:
    """Every kernel of the analysed windows, most time to save per step first."""
    steps = max(steps, 1)
    name_col, dur = trace.name, trace.dur
    gap: dict[int, float] = {}
    sol: dict[int, float] = {}
    priced: dict[int, float] = {}
    best: dict[int, tuple[float, list[int]]] = {}       # name id -> (largest group gap share, that group's rows)
    ops: dict[int, list[dict]] = {}
    modelled: set[int] = set()
    for g in work.groups:
        rows = np.asarray(g.rows, dtype=np.int64)
        rows = rows[trace.kind[rows] == KERNEL] if rows.size else rows
        if rows.size == 0 or g.time_us <= 0:
            continue
        s = op_sol(g, ceilings)
        modelled.update(rows.tolist())
        if s["sol_us"] is None:
            continue
        g_gap = max(0.0, g.time_us - s["sol_us"])
        for nid in np.unique(name_col[rows]).tolist():
            mine = rows[name_col[rows] == nid]
            share = float(dur[mine].sum()) / g.time_us
            gap[nid] = gap.get(nid, 0.0) + share * g_gap
            priced[nid] = priced.get(nid, 0.0) + float(dur[mine].sum())
            sol[nid] = sol.get(nid, 0.0) + share * s["sol_us"]
            ops.setdefault(nid, []).append({"op": g.name, "dims": g.dims[:200], "gap_us": share * g_gap / steps,
                                            "bound": s["bound"], "pct_of_roof": s["pct_of_roof"]})
            if nid not in best or share * g_gap > best[nid][0]:
                best[nid] = (share * g_gap, mine.tolist())
    rows = window_gpu_rows(trace, windows)
    kernels = rows[trace.kind[rows] == KERNEL]
    out = []
    for nid in np.unique(name_col[kernels]).tolist():
        mine = kernels[name_col[kernels] == nid]
        time_us = float(dur[mine].sum()) / steps
        if nid in gap:  # launches of it that no op prices (outside any recorded op) add nothing: unknown
            saved, basis, sol_us = gap[nid] / steps, SOL, sol[nid] / steps
            chosen = steady_launch(trace, np.asarray(best[nid][1]))
            priced_us = priced[nid] / steps
        else:
            unpriced = np.asarray([r for r in mine.tolist() if r not in modelled], dtype=np.int64)
            if unpriced.size == 0:
                continue
            saved, basis, sol_us = float(dur[unpriced].sum()) / steps, TIME, None
            chosen = steady_launch(trace, unpriced)
            priced_us = 0.0
        name = trace.names[nid]
        out.append(KernelTarget(
            kernel=name, function=function_name(name), gain_us=saved, time_us=time_us, sol_us=sol_us,
            gain_pct=100.0 * saved / step_us if step_us > 0 else 0.0, basis=basis,
            launches_per_step=mine.size / steps, row=chosen, priced_us=priced_us,
            ops=sorted(ops.get(nid, []), key=lambda o: -o["gap_us"])[:5]))
    out.sort(key=lambda t: -t.gain_us)
    return out


def choose(targets: list[KernelTarget], n: int, min_gain_pct: float) -> tuple[list[KernelTarget], str]:
    """The first `n` targets that would save at least `min_gain_pct` of the step, and why the list is as long
    as it is (a sentence)."""
    worth = [t for t in targets if t.gain_pct >= min_gain_pct][:max(n, 0)]
    if not targets:
        return [], "no kernel was recorded in the analysed steps"
    if not worth:
        t = targets[0]
        return [], (f"no kernel would save {min_gain_pct:g} % of the step or more: the most, {t.function}, "
                    f"{t.gain_us:,.1f} µs per step ({t.gain_pct:.2f} %, by its {t.basis})")
    more = [t for t in targets[len(worth):] if t.gain_pct >= min_gain_pct]
    return worth, (f"{len(worth)} kernel(s) would each save {min_gain_pct:g} % of the step or more"
                   + (f"; {len(more)} more would, beyond the {n} asked for" if more else ""))
