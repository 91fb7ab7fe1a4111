"""Diagnosis questions: answers computed from the recorded evidence by named analyses, then graded.

Every analysis is `fn(evidence, **args) -> Computed`; puzzle.toml names it in `analysis` and passes
`args`. A Computed carries the value and the numbers behind it (shown after a wrong answer).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable

from perflab.errors import PerflabError

ANALYSES: dict[str, Callable[..., Computed]] = {}


@dataclass
class Computed:
    value: Any
    evidence: dict[str, Any]
    source: str
    alternatives: tuple[str, ...] = ()


@dataclass
class Grade:
    key: str
    given: str
    correct: bool
    computed: Computed
    note: str = ""

    @property
    def expected(self) -> Any:
        return self.computed.value


def analysis(fn: Callable[..., Computed]) -> Callable[..., Computed]:
    ANALYSES[fn.__name__] = fn
    return fn


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


def compute(question: Any, ev: Any) -> Computed:
    return ANALYSES[question.analysis](ev, **question.args)


def normalize(question: Any, raw: str) -> Any:
    """The learner's answer in the question's type; bad input raises PerflabError (exit 2)."""
    text = raw.strip()
    if not text:
        raise PerflabError(f"empty answer for {question.key!r}")
    if question.type == "taxonomy":
        from perflab.doctor.finding import TAXONOMY_IDS

        tid = re.sub(r"[\s_]+", "-", text.lower())
        if tid not in TAXONOMY_IDS:
            raise PerflabError(f"{text!r} is not a taxonomy id (see TAXONOMY.md), e.g. host-sync, launch-overhead")
        return tid
    if question.type == "number":
        cleaned = re.sub(r"(%|ms|x|×)$", "", text.lower().replace(",", "")).strip()
        try:
            value = float(cleaned)
        except ValueError:
            raise PerflabError(f"{text!r} is not a number (answer for {question.key!r})") from None
        if not math.isfinite(value):
            raise PerflabError(f"{text!r} is not a finite number")
        return value
    if question.type == "choice":
        for choice in question.choices:
            if choice.lower() == text.lower():
                return choice
        raise PerflabError(f"{text!r} is not one of the choices: {', '.join(question.choices)}")
    return text


def grade(question: Any, raw: str, computed: Computed) -> Grade:
    given = normalize(question, raw)
    expected = computed.value
    note = ""
    if question.type == "number":
        correct = abs(given - float(expected)) <= question.tolerance * abs(float(expected))
        note = f"answers within ±{question.tolerance:.0%} of the computed value count as right"
    elif question.type == "text":
        correct, note = _grade_text(given, str(expected), computed.alternatives)
    else:
        correct = str(given).lower() == str(expected).lower()
    return Grade(question.key, raw.strip(), correct, computed, note)


MIN_TEXT = 3


def _grade_text(given: str, expected: str, alternatives: tuple[str, ...]) -> tuple[bool, str]:
    """Case-insensitive substring of the expected name that singles it out among the alternatives."""
    g, e = given.lower(), expected.lower()
    if g == e:
        return True, ""
    if len(g) < MIN_TEXT or g not in e:
        return False, ""
    clash = [a for a in alternatives if g in a.lower()]
    if clash:
        return False, f"{given!r} also matches {clash[0][:80]!r}: give a more specific part of the name"
    return True, ""


# Nsight Compute analyses (ncu_top_id, ncu_metric, ...) register themselves into ANALYSES on import.
from perflab.puzzles import questions_ncu as _questions_ncu  # noqa: E402,F401
from perflab.puzzles import questions_autotune as _questions_autotune  # noqa: E402,F401
# Memory-snapshot analyses (memory_doctor_top_id, memory_field, ...) likewise.
from perflab.puzzles import questions_memory as _questions_memory  # noqa: E402,F401
# Host-side analyses (host_time_pct, culprit_function, periodic_outliers) likewise; CPU-only traces too.
from perflab.puzzles import questions_host as _questions_host  # noqa: E402,F401
# Batch-size sweep analyses (sweep_knee, sweep_point) likewise.
from perflab.puzzles import questions_sweep as _questions_sweep  # noqa: E402,F401
# Multi-GPU analyses (straggler_rank, collective_metric, rank_sweep_knee, ...) likewise.
from perflab.puzzles import questions_multigpu as _questions_multigpu  # noqa: E402,F401
# Sampled-profile and profiler-overhead analyses (pyspy_hot_function, profiler_extreme, ...) likewise.
from perflab.puzzles import questions_sampling as _questions_sampling  # noqa: E402,F401
# Before/after analyses (diff_metric, diff_finding) likewise.
from perflab.puzzles import questions_diff as _questions_diff  # noqa: E402,F401
# What is alive at the memory peak (memory_peak_owner) likewise.
from perflab.puzzles import questions_memtimeline as _questions_memtimeline  # noqa: E402,F401
# The seed puzzles' extra records (gemlite_switch_m, gemlite_holes, ..., artifact_pair) likewise.
from perflab.puzzles import questions_seeds as _questions_seeds  # noqa: E402,F401
# Roofline analyses against the recording's measured ceilings (roofline_point, roofline_furthest) likewise.
from perflab.puzzles import questions_roofline as _questions_roofline  # noqa: E402,F401
# Kernel concurrency and annotated-range analyses (concurrency_value, stage_time, stage_top) likewise.
from perflab.puzzles import questions_streams as _questions_streams  # noqa: E402,F401
# Part timers and NVML energy analyses (timer_value, timer_top_part, energy_value, energy_ratio) likewise.
from perflab.puzzles import questions_measured as _questions_measured  # noqa: E402,F401
# GEMM throughput from the trace against the measured matmul ceiling (gemm_speed_of_light) likewise.
from perflab.puzzles import questions_speed as _questions_speed  # noqa: E402,F401
