"""The doctor for Nsight Compute reports: per kernel the rules of rules/ncu_limits.py, ranked, with the
numbers behind them (speed of light per unit, launch, occupancy, stalls) and ncu's own guided analysis
beside ours (doctor/ncu_guided.py)."""
from __future__ import annotations

import re
from pathlib import Path

from perflab.analysis.ncu.ncu_sol import limits_summary
from perflab.analysis.work.roofline import Ceilings, load_ceilings, roofline
from perflab.doctor.finding import SEVERITY_ORDER, Report, rank
from perflab.doctor.ncu_guided import compare
from perflab.doctor.rules.ncu_context import KernelContext
from perflab.doctor.rules.ncu_limits import diagnose_kernel
from perflab.trace.ncu import NcuProfile, load
from perflab.trace.nsight_compute.ncu_coverage import has_speed_of_light
from perflab.trace.nsight_compute.ncu_coverage import notes as coverage_notes


def diagnose_profile(profile: NcuProfile, ceilings: Ceilings | None = None,
                     ops: dict[str, list[str]] | None = None) -> Report:
    """`ops`: per kernel name, the trace's ops that launched it (what ties a kernel to a matrix op)."""
    ceilings = ceilings or load_ceilings(device=profile.device)
    model = roofline(profile, ceilings)
    total = sum(k.duration_s or 0.0 for k in profile.kernels)
    roofs = {p: r.value for p, r in ceilings.compute.items()} | {"dram": ceilings.dram.value}
    findings = []
    kernels = []
    for k, point in zip(profile.kernels, model.points):
        share = (k.duration_s or 0.0) / total if total else 1.0 / len(profile.kernels)
        found = diagnose_kernel(KernelContext(k=k, point=point, share=share, roofs=roofs,
                                              tensor_roof_flops=ceilings.compute["tf32"].value,
                                              ops=list((ops or {}).get(k.name, []))))
        if not has_speed_of_light(k.metrics):
            found = _unjudged(found)
        findings += found
        row = {**k.summary(), "time_share_pct": round(100 * share, 1), "findings": [f.id for f in found],
               "roofline": {"intensity": point.intensity, "tflops": round(point.flops_per_s / 1e12, 3),
                            "dram_gbps": round(point.dram_bytes_per_s / 1e9, 1), "bound": point.bound,
                            "roof": point.roof, "pct_of_roof": point.pct_of_roof},
               "limits": limits_summary(k)}
        if k.rules:
            row["ncu_rules"] = compare(k.rules, sorted(found, key=lambda f: -f.evidence.get("kernel_gain_pct", 0)))
        kernels.append(row)
    ranked = rank(findings)
    healthy_share = sum(f.evidence.get("kernel_time_share_pct", 0.0) for f in ranked if f.id == "healthy")
    if (ranked and all(f.severity == "info" for f in ranked) and any(f.id == "healthy" for f in ranked)
            and healthy_share >= 50.0):
        # nothing to fix anywhere and most of the time judged at its roof: the headline is `healthy`
        ranked = [f for f in ranked if f.id == "healthy"][:1] + [f for f in ranked if f.id != "healthy"]
    elif ranked and all(f.severity == "info" for f in ranked):
        # nothing found, but not judged is not healthy: the kernels that could not be judged lead, the longest first
        blind = sorted((f for f in ranked if f.id == "below-roof"), key=lambda f: -f.evidence.get("kernel_time_share_pct", 0))
        ranked = blind + [f for f in ranked if f.id != "below-roof"]
    analyses = {"kernels": kernels, "ceilings": ceilings.source}
    if not any(k.rules for k in profile.kernels):
        analyses["ncu_rules_note"] = ("no Nsight Compute rule results to compare with: " +
                                      ("a CSV export carries none" if profile.source == "csv" else
                                       "the report holds none"))
    source = {"path": profile.path, "kind": "ncu", "device": profile.device, "reader": profile.source,
              "kernels": len(profile.kernels)}
    if coverage_notes(profile.kernels):
        source["notes"] = coverage_notes(profile.kernels)
    return Report(source=source, verdict=verdict(ranked), findings=ranked, analyses=analyses)


def _unjudged(found: list) -> list:
    """Without both speed-of-light throughputs (SM, DRAM) nothing says what limits a kernel below its roofs: no
    "X is its limit but runs at N %" (a missing throughput is not 0 %), and no other finding above low. A
    kernel measured at a roof (an info finding: the throughput it sits at was there) keeps that."""
    out = []
    for f in found:
        if f.id in ("memory-bound", "compute-bound", "healthy"):
            if f.severity == "info":
                out.append(f)
            continue
        if SEVERITY_ORDER[f.severity] < SEVERITY_ORDER["low"]:
            f.severity = "low"
        f.evidence["unjudged"] = "the report lacks the speed-of-light throughputs (SM, DRAM)"
        out.append(f)
    return out


def verdict(ranked) -> str:
    if not ranked:
        return "No kernel in the report carries the metrics the doctor needs (profile with --set full)."
    top = ranked[0]
    if top.id == "healthy":
        return "Healthy: the profiled kernels run at their roofs with nothing wasted."
    if top.evidence.get("unjudged"):
        return (f"Cannot tell what limits the kernels: the report lacks the SM and DRAM throughputs (the notes "
                f"name the missing metrics). A lead, not a verdict: {top.summary}.")
    if top.severity == "info" and top.id == "below-roof":
        return f"Not judged: {top.summary}."
    if top.severity == "info":
        return f"Nothing to fix: {top.summary}."
    first_step = re.split(r"\. (?=[A-Z(])", top.fix)[0].rstrip(".")  # not at "e.g. "
    return f"{top.summary} ({estimate_text(top)}). Fix: {first_step}."


def estimate_text(f) -> str:
    """What the fix would give: the kernel's speed-up (point, and the range it lies in) and the GPU time."""
    e = f.evidence
    point, rng = e.get("kernel_speedup_est"), e.get("kernel_speedup_range")
    x = lambda v: f"{v:,.0f}" if v >= 100 else f"{v:.3g}"  # noqa: E731
    speed = (f"est. {x(point)}x faster kernel, {x(rng[0])}-{x(rng[1])}x; "
             if isinstance(point, (int, float)) and rng else "est. ")
    return f"{speed}{f.gain_pct:.0f} % of GPU time to gain"


def diagnose_ncu(path: str | Path, *, ceilings: Ceilings | None = None, prefer: str = "auto") -> Report:
    """Diagnose an .ncu-rep or its raw-page CSV export (recognized by content)."""
    return diagnose_profile(load(path, prefer=prefer), ceilings)
