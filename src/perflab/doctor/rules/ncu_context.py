"""What every kernel rule reads (KernelContext: one kernel's ncu metrics, what limits it and its roofline
point) and how it reports (make: a finding whose gain is what its fix would save in this kernel, from the one
model of the kernel's time in analysis/ncu/kernel_time.py, weighted by the kernel's share of the profiled
time; its deciding numbers first in the evidence, then the range and the point estimate of the speed-up)."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable

from perflab.analysis.ncu import kernel_time, matrix_work, ncu_sol, ncu_traffic
from perflab.analysis.ncu.kernel_time import Fix
from perflab.analysis.work.estimate import MAX_GAIN_PCT
from perflab.analysis.work.roofline import RooflinePoint
from perflab.doctor.finding import Finding
from perflab.trace.ncu import KernelProfile

AT_ROOF_PCT = 80.0        # a unit at >= 80 % of its peak is at its roof (ncu: "High Throughput")
BUSY_PCT = 60.0           # below 60 % on every unit ncu calls it a latency issue: no unit is the limit
PRACTICAL_PCT = 100 * kernel_time.PRACTICAL   # what a well-written kernel reaches of a unit's peak
RECORD_FULL = ("profile it again with the warp-state section (ncu --set full, or --section WarpStateStats "
               "--section LaunchStats --section Occupancy)")


@dataclass
class KernelContext:
    k: KernelProfile
    point: RooflinePoint
    share: float                # this kernel's share of the profiled GPU time (0..1)
    tensor_roof_flops: float = 494.7e12   # the TF32 tensor roof (ceilings); datasheet H100 SXM by default
    roofs: dict[str, float] = field(default_factory=dict)   # compute path -> FLOP/s (ceilings: tf32, bf16, ...)
    ops: list[str] = field(default_factory=list)             # the trace's ops that launched it, where known

    def m(self, *names: str) -> float | None:
        return self.k.first(*names)

    @property
    def duration_us(self) -> float | None:
        return self.k.duration_s * 1e6 if self.k.duration_s else None

    def estimate(self, fix: Fix) -> kernel_time.Estimate | None:
        """The kernel's time after `fix` (analysis/ncu/kernel_time.py); None without a duration."""
        dur = self.duration_us
        return kernel_time.estimate(self.units, dur, fix, self.m(*ISSUE)) if dur else None

    @cached_property
    def matrix(self) -> matrix_work.MatrixWork | None:
        return matrix_work.matrix_work(self.k, self.units, self.traffic, self.ops, self.roofs)

    @cached_property
    def units(self) -> ncu_sol.Units:
        return ncu_sol.units(self.k)

    @cached_property
    def launch(self) -> ncu_sol.Launch:
        return ncu_sol.launch(self.k)

    @cached_property
    def occupancy(self) -> ncu_sol.Occupancy:
        return ncu_sol.occupancy(self.k, self.launch)

    @cached_property
    def stalls(self) -> ncu_sol.Stalls | None:
        return ncu_sol.stalls(self.k)

    @cached_property
    def traffic(self) -> ncu_traffic.DramTraffic:
        return ncu_traffic.dram_traffic(self.k)

    @property
    def dram_pct(self) -> float:
        return self.units.memory.get("DRAM", 0.0)

    @property
    def l1_pct(self) -> float:
        return self.units.memory.get("L1/shared", 0.0)

    @property
    def l2_pct(self) -> float:
        return self.units.memory.get("L2", 0.0)

    @property
    def mem_pct(self) -> float:
        """The busiest memory unit (DRAM, L2, L1, or ncu's aggregate where the architecture has no others)."""
        return self.units.busiest_memory[1]

    @property
    def compute_pct(self) -> float:
        """The busiest compute resource over the kernel's whole duration (elapsed, not active cycles:
        SMs left idle by a tail count against it): SM throughput, or one pipe."""
        return self.units.busiest_compute[1]

    @property
    def busiest_pct(self) -> float:
        return self.units.peak_pct

    @property
    def l2_read_hit_pct(self) -> float | None:
        return self.traffic.l2_read_hit_pct

    def sol_evidence(self) -> dict:
        """The speed-of-light numbers: the busiest unit of each side against its peak."""
        mem, mpct = self.units.busiest_memory
        comp, cpct = self.units.busiest_compute
        return {"memory_unit": mem, "memory_throughput_pct": mpct if mem else None,
                "compute_unit": comp, "compute_throughput_pct": cpct if comp else None,
                "dram_throughput_pct": self.units.memory.get("DRAM")}

    def stall_evidence(self, n: int = 3) -> dict:
        st = self.stalls
        if st is None:
            return {}
        top = st.top(n)
        return {"top_stalls": st.to_list(n), "top_stall": top[0].reason if top else None,
                "top_stall_pct": top[0].pct if top else None, "cycles_per_issue": st.cycles_per_issue}


def severity_for(gain: float) -> str:
    return "high" if gain >= 30 else "medium" if gain >= 10 else "low" if gain >= 3 else "info"


ISSUE = ("sm__issue_active.avg.pct_of_peak_sustained_elapsed", "sm__inst_issued.avg.pct_of_peak_sustained_elapsed")


def next_busiest(ctx: KernelContext, unit: str) -> tuple[str | None, float]:
    """The busiest resource beside `unit` (another pipe, a memory unit or the issue slots; not the SM aggregate,
    which holds `unit` itself): what would set the pace once `unit`'s extra work were gone."""
    rest = {n: v for n, v in {**ctx.units.memory, **ctx.units.compute}.items() if n not in (unit, "SM")}
    issue = ctx.m(*ISSUE)
    if issue is not None:
        rest["issue slots"] = issue
    return max(rest.items(), key=lambda kv: kv[1]) if rest else (None, 0.0)


def sol_gap_pct(busiest: float) -> float:
    """The kernel time a unit at `busiest` % of peak would save at the practical ceiling."""
    return 100 * max(0.0, 1 - busiest / PRACTICAL_PCT)


def make(ctx: KernelContext, fid: str, change: Fix | float, evidence: dict, fix: str, summary: str) -> Finding:
    """A finding whose gain is what its fix saves in this kernel, weighted by the kernel's share of the profiled
    time. `change` is what the fix changes in the kernel's work (a Fix: the gain is the point estimate of the
    kernel's time after it, the evidence states the range), or a plain share of the kernel's time (at-roof and
    healthy findings: 0)."""
    est = ctx.estimate(change) if isinstance(change, Fix) else None
    if isinstance(change, Fix):
        kernel_gain = est.gain_pct if est is not None else 100 * (change.symptom_share or 0.0)
    else:
        kernel_gain = change
    kernel_gain = max(0.0, min(MAX_GAIN_PCT, kernel_gain))
    gain = round(kernel_gain * ctx.share, 1)
    ev = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in evidence.items() if v is not None}
    ev.update({"kernel": ctx.k.name, "kernel_time_share_pct": round(100 * ctx.share, 1),
               "kernel_gain_pct": round(kernel_gain, 1), **(est.evidence() if est is not None else {})})
    return Finding(id=fid, severity=severity_for(gain), gain_pct=gain, evidence=ev, fix=fix,
                   summary=f"{ctx.k.name}: {summary}")


RULES: list[Callable[[KernelContext], Finding | None]] = []


def kernel_rule(fn: Callable[[KernelContext], Finding | None]):
    RULES.append(fn)
    return fn


def ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def mb(v: float | None) -> str:
    return "?" if v is None else f"{v / 1e6:,.0f} MB" if v < 1e10 else f"{v / 1e9:,.1f} GB"
