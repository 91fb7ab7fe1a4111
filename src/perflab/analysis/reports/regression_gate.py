"""The CI gate of `perflab diff --gate PCT`: did the step time get slower by more than PCT, beyond noise?

Two profiles are compared only when they can be: the same GPU, driver and clocks (where both traces say), the
same matmul shapes (a different batch or model size is another workload, not a regression), and enough steps
on each side for a confidence interval. Otherwise the gate says why and does not compare.

The change is the ratio of the median step times (after / before). Its 95 % confidence interval comes from a
bootstrap over the per-step times of both traces (steps resampled with replacement on each side, a fixed
seed so a CI run is reproducible). As `perflab check` does for a fix's speed-up, the gate trusts only the
interval: it fails when even the interval's lower end is slower than PCT, and says "within noise" when the
interval holds no change at all.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from perflab.trace.model import CPU_OP, Trace

MIN_STEPS = 5
RESAMPLES = 4000
CONFIDENCE = 0.95
SEED = 20240229
GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
            "aten::_scaled_mm")


@dataclass
class GateResult:
    threshold_pct: float
    comparable: bool
    reasons: list[str] = field(default_factory=list)     # why not comparable
    change_pct: float | None = None                     # median step time, after vs before (+: slower)
    ci_low_pct: float | None = None
    ci_high_pct: float | None = None
    steps: tuple[int, int] = (0, 0)
    failed: bool = False

    @property
    def verdict(self) -> str:
        if not self.comparable:
            return "not comparable: " + "; ".join(self.reasons)
        ci = f"{self.change_pct:+.1f} % (95 % CI {self.ci_low_pct:+.1f} to {self.ci_high_pct:+.1f} %, " \
             f"{self.steps[0]} and {self.steps[1]} steps)"
        if self.failed:
            return f"regression: step time {ci}, slower than the {self.threshold_pct:g} % gate even at the interval's low end"
        if self.ci_low_pct <= 0 <= self.ci_high_pct:
            return f"pass: step time {ci}, within noise"
        return f"pass: step time {ci}, not beyond the {self.threshold_pct:g} % gate"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "steps": list(self.steps), "verdict": self.verdict}


def comparability(before: Trace, after: Trace, times_before: np.ndarray, times_after: np.ndarray) -> list[str]:
    """Why the two profiles cannot be compared for a regression; empty when they can."""
    reasons = []
    for what, key in (("GPU", "device_name"), ("CUDA driver", "cuda_driver_version")):
        b, a = before.meta.get(key), after.meta.get(key)
        if b and a and b != a:
            reasons.append(f"different {what}: {b} vs {a}")
    cb, ca = _clock(before), _clock(after)
    if cb and ca and abs(cb - ca) > 0.02 * max(cb, ca):
        reasons.append(f"different GPU clocks: {cb / 1e6:.0f} vs {ca / 1e6:.0f} MHz")
    sb, sa = matmul_shapes(before), matmul_shapes(after)
    if sb and sa and not sb & sa:
        reasons.append(f"different matmul shapes (a different batch or model): {_few(sb)} vs {_few(sa)}")
    for label, times in (("BEFORE", times_before), ("AFTER", times_after)):
        if times.size < MIN_STEPS:
            reasons.append(f"{label} has {times.size} step(s); a confidence interval needs at least {MIN_STEPS} "
                           "per side (profile more steps, with ProfilerStep or NVTX step ranges)")
    return reasons


def gate(before: Trace, after: Trace, times_before: np.ndarray, times_after: np.ndarray,
         threshold_pct: float) -> GateResult:
    """The gate's decision on two profiles' per-step times (any unit, the same on both sides)."""
    tb, ta = np.asarray(times_before, float), np.asarray(times_after, float)
    tb, ta = tb[np.isfinite(tb) & (tb > 0)], ta[np.isfinite(ta) & (ta > 0)]
    reasons = comparability(before, after, tb, ta)
    out = GateResult(threshold_pct=threshold_pct, comparable=not reasons, reasons=reasons, steps=(tb.size, ta.size))
    if reasons:
        return out
    change, low, high = median_change_ci(tb, ta)
    out.change_pct, out.ci_low_pct, out.ci_high_pct = change, low, high
    out.failed = low > threshold_pct
    return out


def median_change_ci(before: np.ndarray, after: np.ndarray, *, resamples: int = RESAMPLES,
                     confidence: float = CONFIDENCE, seed: int = SEED) -> tuple[float, float, float]:
    """(change, low, high) in % of the median step time after vs before, with a percentile bootstrap CI."""
    rng = np.random.default_rng(seed)
    mb = np.median(rng.choice(before, size=(resamples, before.size)), axis=1)
    ma = np.median(rng.choice(after, size=(resamples, after.size)), axis=1)
    ratios = 100.0 * (ma / mb - 1.0)
    tail = 100.0 * (1.0 - confidence) / 2
    low, high = np.percentile(ratios, [tail, 100.0 - tail])
    return 100.0 * (float(np.median(after)) / float(np.median(before)) - 1.0), float(low), float(high)


def matmul_shapes(trace: Trace) -> set[str]:
    """The input shapes of the matmul operators (record_shapes=True), as recorded."""
    if not trace.shapes or len(trace) == 0:
        return set()
    names = np.array([n in GEMM_OPS for n in trace.names], dtype=bool)
    rows = np.flatnonzero((trace.kind == CPU_OP) & (trace.shape >= 0) & (trace.name >= 0))
    rows = rows[names[trace.name[rows]]]
    return {trace.shapes[i] for i in np.unique(trace.shape[rows]).tolist()}


def _clock(trace: Trace) -> float | None:
    props = trace.meta.get("device_properties") or []
    clocks = [p.get("clockRateHz") for p in props if isinstance(p, dict) and p.get("clockRateHz")]
    return float(clocks[0]) if clocks else None


def _few(shapes: set[str]) -> str:
    shown = sorted(shapes)[:2]
    return ", ".join(s[:60] for s in shown) + (f" (+{len(shapes) - 2})" if len(shapes) > 2 else "")


def gate_runs(before: Any, after: Any, threshold_pct: float) -> GateResult:
    """The gate on two loaded runs (analysis.reports.compare.Run); a PerflabError with the reasons when they cannot be
    compared."""
    from perflab.analysis.reports.compare import step_stats
    from perflab.errors import PerflabError

    times = [np.array(step_stats(r.trace, r.windows).times_ms) if r.windows.kind == "steps" else np.zeros(0)
             for r in (before, after)]
    result = gate(before.trace, after.trace, times[0], times[1], threshold_pct)
    if not result.comparable:
        raise PerflabError(f"{before.label} and {after.label} are not comparable for --gate: {'; '.join(result.reasons)}")
    return result
