"""What every kernel rule reads (KernelContext: one kernel's ncu metrics and its roofline point) and how it
reports (make: a finding whose gain is weighted by the kernel's share of the profiled time)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from perflab.analysis.roofline import RooflinePoint
from perflab.doctor.finding import Finding
from perflab.trace.ncu import KernelProfile

AT_ROOF_PCT = 80.0        # the brief's (and common) definition of "at the roof": >= 80 % of a peak
MAX_GAIN = 90.0
GEMM_NAME = re.compile(r"gemm|matmul|(^|[_:])mm([_<(]|$)|bmm|simt|f32f32|conv|dot_product", re.I)


@dataclass
class KernelContext:
    k: KernelProfile
    point: RooflinePoint
    share: float                # this kernel's share of the profiled GPU time (0..1)
    tensor_roof_flops: float = 494.7e12   # the TF32 tensor roof (ceilings); datasheet H100 SXM by default

    def m(self, *names: str) -> float | None:
        return self.k.first(*names)

    @property
    def dram_pct(self) -> float:
        return self.m("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
                      "dram__throughput.avg.pct_of_peak_sustained_elapsed",
                      "dram__cycles_active.avg.pct_of_peak_sustained_elapsed") or 0.0

    @property
    def l1_pct(self) -> float:
        return self.m("l1tex__throughput.avg.pct_of_peak_sustained_elapsed") or 0.0

    @property
    def l2_pct(self) -> float:
        return self.m("lts__throughput.avg.pct_of_peak_sustained_elapsed") or 0.0

    @property
    def mem_pct(self) -> float:
        """The busiest memory unit (L1, L2 or DRAM), as ncu's Memory Throughput."""
        return max(self.m("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed") or 0.0,
                   self.dram_pct, self.l1_pct, self.l2_pct)

    @property
    def compute_pct(self) -> float:
        """The busiest compute resource over the kernel's whole duration (elapsed, not active cycles:
        SMs left idle by a tail count against it): SM throughput, or the tensor / FMA pipe."""
        return max(self.m("sm__throughput.avg.pct_of_peak_sustained_elapsed") or 0.0,
                   self.m("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
                          "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active") or 0.0,
                   self.m("sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_elapsed",
                          "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active") or 0.0)

    @property
    def l2_read_hit_pct(self) -> float | None:
        return self.m("lts__t_sector_op_read_hit_rate.pct", "lts__t_sector_hit_rate.pct")


def severity_for(gain: float) -> str:
    return "high" if gain >= 30 else "medium" if gain >= 10 else "low" if gain >= 3 else "info"


def make(ctx: KernelContext, fid: str, kernel_gain: float, evidence: dict, fix: str, summary: str) -> Finding:
    """A finding whose gain is the kernel's gain weighted by the kernel's share of the profiled time."""
    kernel_gain = max(0.0, min(MAX_GAIN, kernel_gain))
    gain = round(kernel_gain * ctx.share, 1)
    ev = {"kernel": ctx.k.name, "kernel_time_share_pct": round(100 * ctx.share, 1),
          "kernel_gain_pct": round(kernel_gain, 1)}
    ev.update({k: (round(v, 3) if isinstance(v, float) else v) for k, v in evidence.items() if v is not None})
    return Finding(id=fid, severity=severity_for(gain), gain_pct=gain, evidence=ev, fix=fix,
                   summary=f"{ctx.k.name}: {summary}")


RULES: list[Callable[[KernelContext], Finding | None]] = []


def kernel_rule(fn: Callable[[KernelContext], Finding | None]):
    RULES.append(fn)
    return fn


def ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None
