"""What an Nsight Compute report lets the doctor judge, and what it had to drop.

An export may hold a few columns of the ~2,300 a full profile has (a hand-picked `--metrics` list, a
`--set basic` run, a CSV trimmed by a script). Each judgement below needs one metric of every group
(a group lists the names ncu versions used for it); a report without them says which metrics are
missing and what cannot be judged, instead of reading a missing throughput as 0 %.

Values that cannot be measurements (infinite, beyond 1e24 in base units, or a negative time or size)
are dropped by the reader and counted here. NaN is how ncu_report says "no value": simply missing.
Percentages and counters may dip slightly below zero (ncu's own noise: -0.03 % of a tensor pipe), so
only times and sizes must not be negative.
"""
from __future__ import annotations

import math
from typing import Any

# the memory side: DRAM, or ncu's memory aggregates where an architecture has no dram__ counters (GB10)
SOL_DRAM = ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
            "dram__throughput.avg.pct_of_peak_sustained_elapsed",
            "dram__cycles_active.avg.pct_of_peak_sustained_elapsed",
            "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
            "gpu__compute_memory_access_throughput.avg.pct_of_peak_sustained_elapsed")
SOL_SM = ("sm__throughput.avg.pct_of_peak_sustained_elapsed",
          "sm__instruction_throughput.avg.pct_of_peak_sustained_elapsed")
SPEED_OF_LIGHT = "what limits the kernel (memory- or compute-bound, at its roof or not)"

JUDGEMENTS: dict[str, tuple[tuple[str, ...], ...]] = {
    "each kernel's time and share of the profile": (("gpu__time_duration.sum",),),
    SPEED_OF_LIGHT: (SOL_DRAM, SOL_SM),
    "its place on the roofline (DRAM bytes against FLOPs)": (
        ("dram__bytes_read.sum", "dram__bytes.sum"),
        ("sm__sass_thread_inst_executed_op_ffma_pred_on.sum", "sm__sass_thread_inst_executed_op_fadd_pred_on.sum",
         "sm__inst_executed_pipe_tensor.sum")),
    "launch shape (waves, tail effect)": (("launch__waves_per_multiprocessor",),
                                          ("launch__grid_size", "Grid Size"),
                                          ("device__attribute_multiprocessor_count",)),
    "occupancy (achieved against theoretical, and its limiter)": (
        ("sm__warps_active.avg.pct_of_peak_sustained_active",), ("sm__maximum_warps_per_active_cycle_pct",)),
    "memory access pattern (sectors per request)": (("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",),
                                                    ("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",)),
}
MAX_VALUE = 1e24


def plausible(value: float, unit: str) -> bool:
    """A number a profiler could have measured in this (base) unit (NaN: see is_missing)."""
    if not math.isfinite(value) or abs(value) > MAX_VALUE:
        return False
    return value >= 0 or unit.split("/")[0] not in ("second", "byte")


def is_missing(value: float) -> bool:
    return isinstance(value, float) and math.isnan(value)


def missing_groups(metrics: dict[str, Any]) -> dict[str, list[str]]:
    """judgement -> the metrics (first name of each missing group) it lacks in this kernel."""
    out = {}
    for judgement, groups in JUDGEMENTS.items():
        lacking = [g[0] for g in groups if not any(isinstance(metrics.get(n), (int, float)) for n in g)]
        if lacking:
            out[judgement] = lacking
    return out


def has_speed_of_light(metrics: dict[str, Any]) -> bool:
    return SPEED_OF_LIGHT not in missing_groups(metrics)


def notes(kernels: list[Any]) -> list[str]:
    """The sentences a report carries: metrics missing (and what that leaves unjudged), values dropped."""
    out = []
    lacking: dict[str, list[str]] = {}
    for k in kernels:
        for judgement, names in missing_groups(k.metrics).items():
            lacking.setdefault(judgement, [])
            lacking[judgement] += [n for n in names if n not in lacking[judgement]]
    if lacking:
        names = sorted({n for ns in lacking.values() for n in ns})
        out.append(f"the report lacks {len(names)} metric(s) the doctor reads ({', '.join(names)}), so it cannot "
                   f"judge: {'; '.join(lacking)}. Profile with `ncu --set full` (perflab ncu does) and export "
                   "the whole raw page (--page raw --csv); some GPUs report no dram__ metrics at all (GB10)")
    dropped = {name: raw for k in kernels for name, raw in k.dropped.items()}
    if dropped:
        shown = ", ".join(f"{n} = {raw}" for n, raw in list(dropped.items())[:3])
        out.append(f"dropped {sum(len(k.dropped) for k in kernels)} metric value(s) that cannot be measurements "
                   f"({shown}{', ...' if len(dropped) > 3 else ''})")
    return out
