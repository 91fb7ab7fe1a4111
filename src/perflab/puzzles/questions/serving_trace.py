"""Questions answered from a serving trace read through its iterations: the figures the doctor's serving level
computes from a torch.profiler trace (analysis/engines/trace_iterations.py; the report's analyses["serving"]): the
clock the iterations are read on, the per-token latency (ITL) percentiles, tokens per iteration, the cost of an
iteration that prefills. Registered into questions.ANALYSES on import, like every analysis.
"""
from __future__ import annotations

from typing import Any

from perflab.errors import PerflabError
from perflab.puzzles.questions.registry import Computed, analysis

SHOWN = (("iterations", "iterations"), ("clock", "clock.clock"), ("ITL p50 ms", "itl_ms.p50"),
         ("ITL p99 ms", "itl_ms.p99"), ("tokens per iteration", "tokens_per_iteration.mean"),
         ("decode-only iteration p50 ms", "steps.decode_forward_p50_ms"),
         ("iteration with a prefill p50 ms", "steps.prefill_forward_p50_ms"))


def _source(variant: str) -> str:
    return f"the serving iterations perflab doctor reads in the recorded {variant} trace"


def _figures(ev: Any, variant: str) -> dict[str, Any]:
    serving = ev.report(variant).analyses.get("serving")
    if not serving:
        raise PerflabError(f"the recorded {variant} trace holds no serving iterations (no engine's iteration ranges, "
                           "no repeated model calls)")
    return serving


def _dig(figures: dict[str, Any], path: str, variant: str) -> Any:
    value: Any = figures
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            raise PerflabError(f"the serving iterations of the {variant} trace have no figure {path!r}")
        value = value[part]
    return value


def _evidence(figures: dict[str, Any], variant: str) -> dict[str, Any]:
    out = {}
    for label, path in SHOWN:
        try:
            out[f"{variant} {label}"] = _dig(figures, path, variant)
        except PerflabError:
            continue
    return out


@analysis
def serving_trace_figure(ev: Any, path: str, variant: str = "slow") -> Computed:
    """One figure of the trace's serving iterations by dotted path: `clock.clock` (gpu | host), `itl_ms.p99`,
    `steps.forward_vs_prefill_tokens.ms_per_1k_prefill_tokens`, `tokens_per_iteration.mean`."""
    figures = _figures(ev, variant)
    value = _dig(figures, path, variant)
    if isinstance(value, float):
        value = round(value, 4)
    return Computed(value, {path: value, **_evidence(figures, variant)}, _source(variant))


@analysis
def serving_trace_ratio(ev: Any, path: str = "itl_ms.p99", numerator: str = "slow",
                        denominator: str = "solution") -> Computed:
    """numerator's figure over denominator's (itl_ms.p99, slow over solution: how many times lower the fix's ITL
    tail is, read from the two traces)."""
    top, bottom = _figures(ev, numerator), _figures(ev, denominator)
    num, den = _dig(top, path, numerator), _dig(bottom, path, denominator)
    if not isinstance(num, (int, float)) or not isinstance(den, (int, float)) or not den:
        raise PerflabError(f"{path}: {num!r} / {den!r} is not a ratio of numbers")
    return Computed(round(num / den, 3), {**_evidence(top, numerator), **_evidence(bottom, denominator),
                                          "ratio": f"{num:.4g} / {den:.4g}"},
                    f"the serving iterations perflab doctor reads in the recorded {numerator} and {denominator} traces")
