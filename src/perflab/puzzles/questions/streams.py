"""Stream and range analyses for diagnosis questions (catalog 15-streams-concurrency, 16-nvtx-streams).

`concurrency_value` reads analysis.idle.concurrency (kernels running at once, per-stream busy time, SM fill);
`stage_time` / `stage_top` read analysis.steps.ranges (a record_function / NVTX range's host time against the
GPU time of the work launched inside it, matched by correlation id). Registered into
questions.ANALYSES on import, like every analysis.
"""
from __future__ import annotations

from typing import Any

from perflab.errors import PerflabError
from perflab.puzzles.questions.registry import Computed, analysis

CONCURRENCY_KEYS = ("concurrent_pct", "max_concurrent", "mean_concurrency", "fill_pct", "streams",
                    "busiest_stream_pct", "underfilled_per_step", "sms")
CLOCKS = ("cpu", "gpu")


def _concurrency(ev: Any, variant: str) -> dict:
    from perflab.analysis.idle.concurrency import kernel_concurrency
    from perflab.analysis.steps.windows import analysis_windows

    trace = ev.trace(variant)
    return kernel_concurrency(trace, analysis_windows(trace))


@analysis
def concurrency_value(ev: Any, variant: str = "slow", key: str = "concurrent_pct") -> Computed:
    """Kernel concurrency of the variant's trace: concurrent_pct (share of kernel-busy time with >= 2
    kernels running), max_concurrent, mean_concurrency, fill_pct (blocks / SMs, kernel-time weighted),
    streams (with kernels), busiest_stream_pct (of step time), underfilled_per_step, sms."""
    if key not in CONCURRENCY_KEYS:
        raise PerflabError(f"concurrency key {key!r} must be one of {', '.join(CONCURRENCY_KEYS)}")
    c = _concurrency(ev, variant)
    steps = max(int(ev.summary(variant).get("steps") or 0), 1)
    busiest = c["streams"][0] if c["streams"] else {"stream": None, "busy_pct": 0.0}
    values = {"concurrent_pct": c["concurrent_pct"], "max_concurrent": c["max_concurrent"],
              "mean_concurrency": c["mean_concurrency"], "fill_pct": c["fill_pct"], "streams": len(c["streams"]),
              "busiest_stream_pct": busiest["busy_pct"], "underfilled_per_step": c["underfilled"]["count"] / steps,
              "sms": c["sms"]}
    if values[key] is None:
        raise PerflabError(f"the recorded {variant} trace has no {key} (no grid sizes or SM count in it)")
    evidence = {"kernels": c["kernels"], "SMs": c["sms"], "≥2 kernels running %": round(c["concurrent_pct"], 1),
                "most kernels at once": c["max_concurrent"],
                "SM fill % (blocks / SMs)": None if c["fill_pct"] is None else round(c["fill_pct"], 1),
                "streams": ", ".join(f"{s['stream']}: {s['busy_pct']:.0f}% busy, {s['kernels']} kernels"
                                     for s in c["streams"][:8])}
    return Computed(round(float(values[key]), 3), evidence, f"the kernels of the recorded {variant} trace")


def _stages(ev: Any, variant: str, names: Any) -> dict:
    from perflab.analysis.steps.ranges import stage_times
    from perflab.analysis.steps.windows import analysis_windows

    trace = ev.trace(variant)
    return stage_times(trace, analysis_windows(trace), names or None)


def _stage_evidence(stages: list[dict]) -> dict[str, str]:
    return {s["name"]: f"host {s['cpu_ms_per_step']:.3f} ms, GPU {s['gpu_ms_per_step']:.3f} ms per step "
                       f"({s['ops'] // max(s['count'], 1)} GPU ops)" for s in stages}


@analysis
def stage_time(ev: Any, name: str, variant: str = "slow", clock: str = "gpu") -> Computed:
    """ms per step of one annotated range: its host duration (clock = cpu) or the GPU time of the kernels,
    copies and memsets launched inside it (clock = gpu, linked by correlation id)."""
    if clock not in CLOCKS:
        raise PerflabError(f"stage clock {clock!r} must be cpu or gpu")
    stages = _stages(ev, variant, None)["stages"]
    for s in stages:
        if s["name"] == name:
            return Computed(round(s[f"{clock}_ms_per_step"], 4), _stage_evidence(stages),
                            f"the {name!r} ranges of the recorded {variant} trace")
    raise PerflabError(f"no range {name!r} in the recorded {variant} trace "
                       f"(ranges: {', '.join(s['name'] for s in stages) or 'none'})")


@analysis
def stage_top(ev: Any, variant: str = "slow", clock: str = "gpu", names: list | None = None) -> Computed:
    """The annotated range (among `names`, default all) with the most time per step on the host (cpu) or
    on the GPU (gpu)."""
    if clock not in CLOCKS:
        raise PerflabError(f"stage clock {clock!r} must be cpu or gpu")
    stages = _stages(ev, variant, names)["stages"]
    if not stages:
        raise PerflabError(f"no annotated ranges in the recorded {variant} trace")
    top = max(stages, key=lambda s: s[f"{clock}_ms_per_step"])
    return Computed(top["name"], _stage_evidence(stages), f"the annotated ranges of the recorded {variant} trace",
                    alternatives=tuple(s["name"] for s in stages if s is not top))
