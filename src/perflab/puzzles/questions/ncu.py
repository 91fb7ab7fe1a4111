"""Analyses over a recording's Nsight Compute evidence (puzzles with tools = ["ncu"]).

They register into questions.ANALYSES like the trace analyses, and read `<variant>.csv.gz` of the
recording (ncu_evidence): the doctor's ncu findings and any raw metric of the profiled kernel(s).
Each ncu profile and its doctor report are computed once per Evidence object.
"""
from __future__ import annotations

import re
from typing import Any

from perflab.errors import PerflabError
from perflab.puzzles.evidence import ncu as ncu_evidence
from perflab.puzzles.questions.registry import Computed, analysis


def _cache(ev: Any) -> dict[str, Any]:
    cache = getattr(ev, "_ncu_cache", None)
    if cache is None:
        cache = {}
        ev._ncu_cache = cache
    return cache


def ncu_profile(ev: Any, variant: str) -> Any:
    cache = _cache(ev)
    key = ("profile", variant)
    if key not in cache:
        cache[key] = ncu_evidence.Ncu().replay(ev, variant)
    return cache[key]


def ncu_report(ev: Any, variant: str) -> Any:
    cache = _cache(ev)
    key = ("report", variant)
    if key not in cache:
        cache[key] = ncu_evidence.diagnose(ncu_profile(ev, variant))
    return cache[key]


def _source(variant: str) -> str:
    return f"the recorded {variant} Nsight Compute report ({variant}.ncu-rep.gz)"


def pick_kernel(ev: Any, variant: str, kernel: str = "") -> Any:
    """The kernel whose name matches `kernel` (a regex), else the longest-running profiled kernel."""
    kernels = ncu_profile(ev, variant).kernels
    if kernel:
        kernels = [k for k in kernels if re.search(kernel, k.name)]
    if not kernels:
        raise PerflabError(f"no kernel matching {kernel!r} in {_source(variant)}")
    return max(kernels, key=lambda k: k.duration_s or 0.0)


@analysis
def ncu_top_id(ev: Any, variant: str = "slow") -> Computed:
    """The doctor's most important finding on the variant's Nsight Compute report."""
    report = ncu_report(ev, variant)
    if not report.findings:
        raise PerflabError(f"the doctor found nothing in {_source(variant)}")
    top = report.findings[0]
    evidence: dict[str, Any] = {"top finding": top.id, "severity": top.severity,
                                "estimated gain %": round(float(top.gain_pct), 1)}
    evidence.update({k: v for k, v in top.evidence.items() if isinstance(v, (int, float, str))})
    others = [f"{f.id} ({f.severity})" for f in report.findings[1:4]]
    if others:
        evidence["next findings"] = ", ".join(others)
    return Computed(top.id, evidence, f"perflab doctor on {_source(variant)}")


@analysis
def ncu_metric(ev: Any, metric: str, variant: str = "slow", kernel: str = "", scale: float = 1.0) -> Computed:
    """One raw metric of the profiled kernel (base units, times `scale`: 1e6 turns seconds into µs)."""
    k = pick_kernel(ev, variant, kernel)
    value = k.get(metric)
    if value is None:
        raise PerflabError(f"{_source(variant)} has no metric {metric!r} for kernel {k.name}")
    return Computed(value * scale, {"kernel": k.name, metric: value, "scale": scale,
                                    "duration µs": round((k.duration_s or 0) * 1e6, 2)}, _source(variant))


@analysis
def ncu_ratio(ev: Any, numerator: str, denominator: str, variant: str = "slow", kernel: str = "",
              scale: float = 1.0) -> Computed:
    """numerator / denominator of one kernel (times `scale`): sectors per request, wavefronts per
    instruction, bytes per second (dram__bytes_read.sum / gpu__time_duration.sum, scale 1e-9: GB/s), ..."""
    k = pick_kernel(ev, variant, kernel)
    num, den = k.get(numerator), k.get(denominator)
    if num is None or not den:
        raise PerflabError(f"{_source(variant)} lacks {numerator!r} or {denominator!r} (or it is 0) for {k.name}")
    return Computed(num / den * scale, {"kernel": k.name, numerator: num, denominator: den, "scale": scale},
                    _source(variant))


@analysis
def ncu_finding_value(ev: Any, finding: str, field: str, variant: str = "slow") -> Computed:
    """A number the doctor's ncu rule `finding` measured (a key of the finding's evidence)."""
    report = ncu_report(ev, variant)
    for f in report.findings:
        if f.id == finding:
            if field not in f.evidence or f.evidence[field] is None:
                raise PerflabError(f"the {finding} finding has no {field!r} (has: {', '.join(f.evidence)})")
            return Computed(f.evidence[field], {k: v for k, v in f.evidence.items() if isinstance(v, (int, float, str))},
                            f"perflab doctor on {_source(variant)}")
    raise PerflabError(f"the doctor reports no {finding} in {_source(variant)}")


@analysis
def ncu_speedup(ev: Any, kernel: str = "") -> Computed:
    """Kernel duration slow / solution, both from the ncu reports (gpu__time_duration.sum)."""
    slow, fixed = pick_kernel(ev, "slow", kernel), pick_kernel(ev, "solution", kernel)
    ts = sum(k.duration_s or 0 for k in ncu_profile(ev, "slow").kernels)
    tf = sum(k.duration_s or 0 for k in ncu_profile(ev, "solution").kernels)
    if not ts or not tf:
        raise PerflabError("the ncu reports carry no kernel durations")
    return Computed(ts / tf, {"slow kernels": slow.name, "slow µs": round(ts * 1e6, 2), "solution kernels": fixed.name,
                              "solution µs": round(tf * 1e6, 2)}, "the recorded slow and solution ncu reports")


@analysis
def ncu_instruction_ratio(ev: Any, kernel: str = "", metric: str = "smsp__inst_executed.sum") -> Computed:
    """Executed warp instructions slow / solution (or another count metric), from the two ncu reports."""
    slow, fixed = pick_kernel(ev, "slow", kernel), pick_kernel(ev, "solution", kernel)
    a, b = slow.get(metric), fixed.get(metric)
    if a is None or not b:
        raise PerflabError(f"the ncu reports lack {metric!r} for {slow.name} / {fixed.name}")
    return Computed(a / b, {"slow kernel": slow.name, f"slow {metric}": a, "solution kernel": fixed.name,
                            f"solution {metric}": b}, "the recorded slow and solution ncu reports")


@analysis
def ncu_metric_ratio(ev: Any, metric: str, kernel: str = "", invert: bool = False) -> Computed:
    """Kernel-level diff of two reports of one kernel: metric slow / solution (solution / slow if invert)."""
    slow, fixed = pick_kernel(ev, "slow", kernel), pick_kernel(ev, "solution", kernel)
    a, b = slow.get(metric), fixed.get(metric)
    num, den = (b, a) if invert else (a, b)
    if num is None or not den:
        raise PerflabError(f"the ncu reports lack {metric!r} (or it is 0) for {slow.name} / {fixed.name}")
    diff = {}
    for m in ("gpu__time_duration.sum", "launch__grid_size", "launch__waves_per_multiprocessor",
              "sm__warps_active.avg.pct_of_peak_sustained_active", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
              "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"):
        if slow.get(m) is not None and fixed.get(m) is not None:
            diff[m] = f"{slow.get(m):.4g} -> {fixed.get(m):.4g}"
    return Computed(num / den, {"slow kernel": slow.name, "solution kernel": fixed.name, metric: f"{a} -> {b}", **diff},
                    "the recorded slow and solution ncu reports (a kernel-level diff)")


@analysis
def ncu_pct_of_ceiling(ev: Any, numerator: str, denominator: str, ceiling: str = "dram_copy",
                       variant: str = "solution", kernel: str = "", scale: float = 1e-9) -> Computed:
    """A kernel's rate (numerator / denominator x scale, e.g. GB/s) as % of a ceiling that `perflab bench`
    measured (the recording's ceilings.json, results.<ceiling>.value in the same unit)."""
    import json

    path = ev.folder / "ceilings.json"
    try:
        bench = json.loads(path.read_text(encoding="utf-8"))
        ceil = float(bench["results"][ceiling]["value"])
    except (OSError, ValueError, KeyError, TypeError):
        raise PerflabError(f"no measured {ceiling!r} ceiling in {path} (record it with `perflab bench`)") from None
    rate = ncu_ratio(ev, numerator, denominator, variant=variant, kernel=kernel, scale=scale)
    man = bench.get("manifest", {})
    return Computed(100 * rate.value / ceil, {**rate.evidence, "rate": round(rate.value, 2), ceiling: ceil,
                                              "ceiling measured on": f"{man.get('gpu')} {str(man.get('date'))[:10]}"},
                    f"{rate.source} against perflab bench's {ceiling}")
