"""Questions answered from the recorded torch.profiler traces and timings: the doctor's top finding, the
evidence summary's fields (GPU busy, kernels per step, syncs, copies, the top kernel), the speed-ups.
"""
from __future__ import annotations

from typing import Any

from perflab.errors import PerflabError
from perflab.puzzles.questions.registry import Computed, analysis


def _steps(summary: dict[str, Any]) -> int:
    return max(int(summary.get("steps") or 0), 1)


# Two kinds of step time: under the profiler (the traces) and without it (the check's CUDA-event timings).
TIMED = "the recorded timings without the profiler (measurements.json)"


def _source(variant: str) -> str:
    return f"the recorded {variant} trace"


@analysis
def doctor_top_id(ev: Any, variant: str = "slow", level: str = "") -> Computed:
    """The doctor's most important finding on the variant's trace (with `level`: among that level's, e.g.
    "system": the top-down answer when a kernel-level finding ranks above the system-level cause)."""
    report = ev.report(variant)
    findings = [f for f in report.findings if not level or f.level == level]
    if not findings:
        raise PerflabError(f"the doctor found nothing{f' at level {level}' if level else ''} in {_source(variant)}")
    top = findings[0]
    evidence: dict[str, Any] = {"top finding": top.id, "severity": top.severity,
                                "estimated gain %": round(float(top.gain_pct), 1)}
    evidence.update({k: v for k, v in top.evidence.items() if isinstance(v, (int, float, str))})
    others = [f"{f.id} ({f.severity})" for f in report.findings if f is not top][:3]
    if others:
        evidence["next findings"] = ", ".join(others)
    return Computed(top.id, evidence, f"perflab doctor on {_source(variant)}")


def _summary_value(ev: Any, variant: str, key: str, *context: str) -> Computed:
    s = ev.summary(variant)
    return Computed(s[key], {k: s.get(k) for k in (key, "steps", *context)}, _source(variant))


@analysis
def gpu_busy_pct(ev: Any, variant: str = "slow") -> Computed:
    return _summary_value(ev, variant, "gpu_busy_pct", "step_time_ms", "span_ms")


@analysis
def step_time_ms(ev: Any, variant: str = "slow") -> Computed:
    c = _summary_value(ev, variant, "step_time_ms", "span_ms", "gpu_busy_pct")
    c.source += " (step time under the profiler, longer than the timings without it)"
    return c


@analysis
def kernels_per_step(ev: Any, variant: str = "slow") -> Computed:
    return _summary_value(ev, variant, "kernels_per_step", "mean_kernel_us", "step_time_ms")


@analysis
def syncs_per_step(ev: Any, variant: str = "slow") -> Computed:
    syncs = ev.summary(variant)["syncs"]
    names = ", ".join(f"{n} ×{c}" for n, c in sorted(syncs.get("names", {}).items(), key=lambda kv: -kv[1]))
    return Computed(syncs["per_step"], {"syncs": syncs["count"], "steps": ev.summary(variant)["steps"],
                                        "per step": syncs["per_step"], "calls": names or "none"},
                    _source(variant))


@analysis
def top_kernel(ev: Any, variant: str = "slow") -> Computed:
    kernels = ev.summary(variant)["top_kernels"]
    if not kernels:
        raise PerflabError(f"no kernels in {_source(variant)}")
    top = kernels[0]
    return Computed(top["name"], {"kernel": top["name"], "total µs": top["total_us"], "count": top["count"],
                                  "% of kernel time": top["pct"]},
                    _source(variant), alternatives=tuple(k["name"] for k in kernels[1:]))


def _copies(ev: Any, variant: str, direction: str) -> tuple[dict[str, Any], list[str]]:
    copies = ev.summary(variant)["copies"]
    if direction and direction not in ("h2d", "d2h", "d2d"):
        raise PerflabError(f"copy direction {direction!r} must be h2d, d2h or d2d")
    dirs = [direction] if direction else sorted(copies)
    return copies, dirs


@analysis
def copy_bytes_per_step(ev: Any, variant: str = "slow", direction: str = "h2d") -> Computed:
    copies, dirs = _copies(ev, variant, direction)
    c = copies.get(dirs[0], {})
    steps = _steps(ev.summary(variant))
    return Computed(c.get("bytes", 0) / steps, {"direction": dirs[0], "copies": c.get("count", 0),
                                                 "bytes": c.get("bytes", 0), "steps": steps,
                                                 "GB/s": c.get("gbps")}, _source(variant))


@analysis
def pageable_copies_per_step(ev: Any, variant: str = "slow", direction: str = "") -> Computed:
    copies, dirs = _copies(ev, variant, direction)
    steps = _steps(ev.summary(variant))
    pageable = sum(copies.get(d, {}).get("pageable_count", 0) for d in dirs)
    evidence = {f"{d} pageable/total": f"{copies.get(d, {}).get('pageable_count', 0)}/"
                                       f"{copies.get(d, {}).get('count', 0)}" for d in dirs}
    evidence["steps"] = steps
    return Computed(pageable / steps, evidence, _source(variant))


@analysis
def speedup(ev: Any, stat: str = "point") -> Computed:
    m = ev.measurements()
    sp = m.get("speedup", {})
    if stat not in sp:
        raise PerflabError(f"measurements.json has no speedup.{stat}")
    return Computed(sp[stat], {"slow median ms": m.get("slow", {}).get("median_ms"),
                               "solution median ms": m.get("solution", {}).get("median_ms"),
                               "95 % CI": f"{sp.get('ci_low')} .. {sp.get('ci_high')}", "bar": sp.get("bar")},
                    TIMED)


def _median_ms(m: dict[str, Any], variant: str) -> float:
    row = m.get("stages", {}).get(variant) or m.get(variant) or {}
    if "median_ms" not in row:
        raise PerflabError(f"measurements.json has no timings of {variant!r}")
    return float(row["median_ms"])


@analysis
def variant_speedup(ev: Any, variant: str = "solution", over: str = "slow") -> Computed:
    """median(over) / median(variant) from measurements.json: a step of a fix loop (`stages`) over the one
    before it. A stage over slow uses the slow timings interleaved with that stage's (recording.measure_stages)."""
    m = ev.measurements()
    stage = m.get("stages", {}).get(variant, {})
    base = float(stage["slow_median_ms"]) if over == "slow" and "slow_median_ms" in stage else _median_ms(m, over)
    mine = _median_ms(m, variant)
    return Computed(base / mine, {f"{over} median ms": round(base, 4), f"{variant} median ms": round(mine, 4)},
                    TIMED)


@analysis
def summary_field(ev: Any, path: str, variant: str = "slow") -> Computed:
    """Any field of the evidence summary by dotted path: `copies.h2d.gbps`, `top_kernels.0.name`."""
    value: Any = ev.summary(variant)
    for part in path.split("."):
        try:
            value = value[int(part)] if isinstance(value, list) else value[part]
        except (KeyError, IndexError, ValueError, TypeError):
            raise PerflabError(f"the evidence summary has no field {path!r}") from None
    return Computed(value, {path: value}, _source(variant))
