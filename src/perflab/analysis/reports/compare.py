"""Before/after: two profiles of the same workload compared (what `perflab diff` shows).

`compare(before, after)` is a pure function of two loaded runs (a Kineto trace and the doctor's report
on it) and returns a `Diff`: step time (median and spread), GPU busy, time per step by kernel type
and by kernel, and the findings that appeared, disappeared or changed severity.
`perflab.doctor.sides.load_run(ref)` reads a trace file, a folder of per-rank traces, or `run:N` (the N-th
latest run in the run history, perflab/history.py, 1 = the latest) and diagnoses it.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from perflab.analysis.work.kernels import TYPES, kernel_breakdown
from perflab.analysis.reports.promises import promises
from perflab.analysis.steps.windows import Windows, analysis_windows, step_times
from perflab.trace.model import Trace

SCHEMA = "perflab.diff/1"
SEVERITY_RANK = {"info": 0, "low": 1, "medium": 2, "high": 3}
PROFILED_NOTE = ("step times are medians of the profiled steps (under torch.profiler); `perflab check` times the "
                 "fix without the profiler (interleaved runs), so its speed-up differs from this one")


@dataclass
class Run:
    """One side of a diff: what was loaded, and the doctor's report on it."""

    label: str
    trace: Trace
    report: Any  # perflab.doctor.finding.Report
    windows: Windows | None = None

    def __post_init__(self) -> None:
        if self.windows is None:
            self.windows = analysis_windows(self.trace)


@dataclass
class StepStats:
    steps: int
    median_ms: float
    p25_ms: float
    p75_ms: float
    min_ms: float
    max_ms: float
    times_ms: list[float]

    @property
    def iqr_ms(self) -> float:
        return self.p75_ms - self.p25_ms

    @property
    def spread_pct(self) -> float:
        """Interquartile range as % of the median: how steady the steps are."""
        return 100.0 * self.iqr_ms / self.median_ms if self.median_ms else 0.0


@dataclass
class Side:
    label: str
    path: str
    device: str
    window: str          # how the steps were found: steps | step | gpu-span | trace-span
    step: StepStats
    gpu_busy_pct: float
    kernels_per_step: float
    mean_kernel_us: float
    syncs_per_step: float
    verdict: str
    top_finding: str


@dataclass
class Delta:
    """A number before and after. `change` is after - before; `ratio` after / before (None if before is 0)."""

    name: str
    before: float
    after: float
    unit: str = ""
    lower_is_better: bool = True

    @property
    def change(self) -> float:
        return self.after - self.before

    @property
    def ratio(self) -> float | None:
        return self.after / self.before if self.before else None

    @property
    def change_pct(self) -> float | None:
        return 100.0 * self.change / self.before if self.before else None

    @property
    def better(self) -> bool | None:
        """True when the change goes the good way, None when nothing changed."""
        if self.change == 0:
            return None
        return (self.change < 0) == self.lower_is_better

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "change": self.change, "ratio": self.ratio, "change_pct": self.change_pct}


@dataclass
class KernelDelta:
    name: str
    type: str
    before_us: float     # GPU time per step
    after_us: float
    before_count: float  # launches per step
    after_count: float

    @property
    def change_us(self) -> float:
        return self.after_us - self.before_us

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "change_us": self.change_us}


@dataclass
class FindingChange:
    id: str
    status: str                      # appeared | disappeared | worse | better | unchanged
    before_severity: str | None
    after_severity: str | None
    before_gain_pct: float | None
    after_gain_pct: float | None
    summary: str = ""


@dataclass
class Diff:
    before: Side
    after: Side
    metrics: list[Delta]
    categories: list[Delta]          # GPU time per step (µs) by kernel type
    kernels: list[KernelDelta]       # the kernels whose time per step changed most
    findings: list[FindingChange]
    notes: list[str] = field(default_factory=list)
    gate: dict[str, Any] | None = None  # perflab diff --gate (analysis/reports/regression_gate.py)
    promises: list = field(default_factory=list)   # what each finding gone had promised (analysis/reports/promises.py)

    @property
    def speedup(self) -> float | None:
        """Median step time before / after (> 1: the after run is faster)."""
        a = self.after.step.median_ms
        return self.before.step.median_ms / a if a else None

    def metric(self, name: str) -> Delta:
        return next(m for m in self.metrics if m.name == name)

    def category(self, name: str) -> Delta | None:
        return next((c for c in self.categories if c.name == name), None)

    def finding(self, fid: str) -> FindingChange | None:
        return next((f for f in self.findings if f.id == fid), None)

    def by_status(self, status: str) -> list[str]:
        return [f.id for f in self.findings if f.status == status]

    @property
    def verdict(self) -> str:
        b, a = self.before.step, self.after.step
        sp = self.speedup
        if sp is None:
            head = "The after run has no measurable step time."
        elif sp >= 1.02:
            head = f"After is {sp:.2f}× faster per profiled step ({b.median_ms:.3g} → {a.median_ms:.3g} ms)."
        elif sp <= 1 / 1.02:
            head = f"After is {1 / sp:.2f}× slower per profiled step ({b.median_ms:.3g} → {a.median_ms:.3g} ms)."
        else:
            head = f"Profiled step time is unchanged within 2 % ({b.median_ms:.3g} → {a.median_ms:.3g} ms)."
        busy = self.metric("gpu_busy_pct")
        parts = [head, f"GPU busy {busy.before:.1f} → {busy.after:.1f} %."]
        names = {m.name for m in self.metrics}
        if {"itl_p50_ms", "itl_p99_ms"} <= names:   # a serving trace: what a decoding request waits per token
            p50, p99 = self.metric("itl_p50_ms"), self.metric("itl_p99_ms")
            parts.append(f"Per-token latency p50 {p50.before:.3g} → {p50.after:.3g} ms, p99 {p99.before:.3g} → "
                         f"{p99.after:.3g} ms.")
        for status, word in (("disappeared", "Gone"), ("appeared", "New"), ("worse", "Worse"), ("better", "Better")):
            ids = [i for i in self.by_status(status) if i != "healthy"]
            if ids:
                parts.append(f"{word}: {', '.join(ids)}.")
        if "healthy" in self.by_status("appeared"):
            parts.append("The doctor now finds it healthy.")
        elif "healthy" in self.by_status("disappeared"):
            parts.append("It is no longer healthy.")
        return " ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        def side(s: Side) -> dict[str, Any]:
            d = asdict(s)
            d["step"].update(iqr_ms=s.step.iqr_ms, spread_pct=s.step.spread_pct)
            return d

        return {"schema": SCHEMA, "verdict": self.verdict, "speedup": self.speedup,
                "before": side(self.before), "after": side(self.after),
                "metrics": [m.to_dict() for m in self.metrics],
                "categories": [c.to_dict() for c in self.categories],
                "kernels": [k.to_dict() for k in self.kernels],
                "findings": [asdict(f) for f in self.findings], "notes": list(self.notes),
                "promises": [p.to_dict() for p in self.promises],
                **({"gate": self.gate} if self.gate is not None else {})}


def step_stats(trace: Trace, windows: Windows) -> StepStats:
    """Per-step times (ProfilerSteps); without steps, the analysed span counts as one step."""
    times = step_times(trace) if windows.kind == "steps" else np.array([windows.total])
    if times.size == 0:
        times = np.array([windows.total])
    ms = times / 1e3
    p25, med, p75 = (float(v) for v in np.percentile(ms, [25, 50, 75]))
    return StepStats(steps=int(ms.size) if windows.kind == "steps" else 0, median_ms=med, p25_ms=p25, p75_ms=p75,
                     min_ms=float(ms.min()), max_ms=float(ms.max()), times_ms=[float(v) for v in ms])


def _side(run: Run) -> Side:
    summary = run.report.analyses.get("summary") or {}
    step = step_stats(run.trace, run.windows)
    top = run.report.findings[0].id if run.report.findings else ""
    return Side(label=run.label, path=str(run.trace.meta.get("path", "")), device=str(summary.get("device", "")),
                window=run.windows.kind, step=step, gpu_busy_pct=float(summary.get("gpu_busy_pct", 0.0)),
                kernels_per_step=float(summary.get("kernels_per_step", 0.0)),
                mean_kernel_us=float(summary.get("mean_kernel_us", 0.0)),
                syncs_per_step=float((summary.get("syncs") or {}).get("per_step", 0.0)),
                verdict=run.report.verdict, top_finding=top)


def _per_step(run: Run) -> tuple[dict, int]:
    n = max(len(run.windows.steps), 1)
    return kernel_breakdown(run.trace, run.windows, top=1 << 30), n


def _findings(before: Any, after: Any) -> list[FindingChange]:
    def strongest(report: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in report.findings:
            best = out.get(f.id)
            if best is None or (SEVERITY_RANK[f.severity], f.gain_pct) > (SEVERITY_RANK[best.severity], best.gain_pct):
                out[f.id] = f
        return out

    return finding_changes(strongest(before), strongest(after))


def finding_changes(b: dict[str, Any], a: dict[str, Any]) -> list[FindingChange]:
    """Findings by id before and after -> what appeared, disappeared or changed severity (also used by the
    kernel-level diff of two Nsight Compute reports, analysis/ncu/ncu_compare.py)."""
    changes = []
    for fid in list(b) + [i for i in a if i not in b]:
        fb, fa = b.get(fid), a.get(fid)
        if fb is None:
            status = "appeared"
        elif fa is None:
            status = "disappeared"
        elif SEVERITY_RANK[fa.severity] > SEVERITY_RANK[fb.severity]:
            status = "worse"
        elif SEVERITY_RANK[fa.severity] < SEVERITY_RANK[fb.severity]:
            status = "better"
        else:
            status = "unchanged"
        changes.append(FindingChange(
            id=fid, status=status, before_severity=fb.severity if fb else None,
            after_severity=fa.severity if fa else None, before_gain_pct=fb.gain_pct if fb else None,
            after_gain_pct=fa.gain_pct if fa else None, summary=(fa or fb).summary))
    order = {"appeared": 0, "worse": 1, "disappeared": 2, "better": 3, "unchanged": 4}
    return sorted(changes, key=lambda c: (order[c.status], -max(SEVERITY_RANK.get(c.before_severity or "info", 0),
                                                                 SEVERITY_RANK.get(c.after_severity or "info", 0))))


# a serving trace's figures (analyses.serving, analysis/engines/trace_iterations.py): name -> (path, unit, lower is
# better); compared where both sides have them
SERVING_METRICS = {"itl_p50_ms": (("itl_ms", "p50"), "ms", True), "itl_p90_ms": (("itl_ms", "p90"), "ms", True),
                   "itl_p99_ms": (("itl_ms", "p99"), "ms", True),
                   "iteration_p50_ms": (("iteration_ms", "p50"), "ms", True),
                   "tokens_per_iteration": (("tokens_per_iteration", "mean"), "", False),
                   "tokens_per_s": (("tokens_per_s",), "", False)}


def serving_deltas(before, after) -> list[Delta]:
    """Per-token latency, iteration time, tokens per iteration and throughput of two serving traces."""
    sb, sa = (r.analyses.get("serving") or {} for r in (before, after))
    out = []
    for name, (path, unit, lower) in SERVING_METRICS.items():
        vb, va = _dig(sb, path), _dig(sa, path)
        if isinstance(vb, (int, float)) and isinstance(va, (int, float)):
            out.append(Delta(name, float(vb), float(va), unit, lower_is_better=lower))
    return out


def _dig(d: dict, path: tuple):
    for k in path:
        d = d.get(k) if isinstance(d, dict) else None
    return d


def compare(before: Run, after: Run, *, top: int = 10) -> Diff:
    """Compare two runs. Times by kernel are per step, so runs with different step counts compare."""
    sb, sa = _side(before), _side(after)
    kb, nb = _per_step(before)
    ka, na = _per_step(after)
    metrics = [
        Delta("step_time_ms", sb.step.median_ms, sa.step.median_ms, "ms"),
        Delta("step_spread_pct", sb.step.spread_pct, sa.step.spread_pct, "%"),
        Delta("gpu_busy_pct", sb.gpu_busy_pct, sa.gpu_busy_pct, "%", lower_is_better=False),
        Delta("gpu_time_per_step_us", kb["gpu_time_us"] / nb, ka["gpu_time_us"] / na, "µs"),
        Delta("kernels_per_step", sb.kernels_per_step, sa.kernels_per_step, ""),
        Delta("mean_kernel_us", sb.mean_kernel_us, sa.mean_kernel_us, "µs", lower_is_better=False),
        Delta("syncs_per_step", sb.syncs_per_step, sa.syncs_per_step, ""),
        *serving_deltas(before.report, after.report),
    ]
    categories = [Delta(t, kb["by_type"].get(t, {}).get("total_us", 0.0) / nb,
                        ka["by_type"].get(t, {}).get("total_us", 0.0) / na, "µs")
                  for t in TYPES if t in kb["by_type"] or t in ka["by_type"]]
    rows_b = {k["name"]: k for k in kb["by_name"]}
    rows_a = {k["name"]: k for k in ka["by_name"]}
    kernels = []
    for name in set(rows_b) | set(rows_a):
        rb, ra = rows_b.get(name), rows_a.get(name)
        kernels.append(KernelDelta(
            name=name, type=(ra or rb)["type"],
            before_us=rb["total_us"] / nb if rb else 0.0, after_us=ra["total_us"] / na if ra else 0.0,
            before_count=rb["count"] / nb if rb else 0.0, after_count=ra["count"] / na if ra else 0.0))
    kernels.sort(key=lambda k: (-abs(k.change_us), k.name))
    notes = [PROFILED_NOTE]
    if sb.device and sa.device and sb.device != sa.device:
        notes.append(f"different GPUs: {sb.device} vs {sa.device}")
    for run in (before, after):
        notes += [f"{run.label}: {n}" for n in run.report.source.get("notes") or []]  # what the reader left out
    for s in (sb, sa):
        if s.window != "steps":
            notes.append(f"{s.label}: no steps (ProfilerStep or NVTX step ranges), the {s.window} counts as one step")
    changes = _findings(before.report, after.report)
    diff = Diff(before=sb, after=sa, metrics=metrics, categories=categories, kernels=kernels[:top],
                findings=changes, notes=notes)
    diff.promises = promises(before.report.findings, [c.id for c in changes if c.status == "disappeared"],
                             diff.speedup)
    return diff
