"""Analyses of recorded measurements beyond the trace: part timers (<variant>.timers.json, puzzles with a
[timers] table) and energy (<variant>.energy.json, puzzles with tools = ["nvml"]).

Registered into questions.ANALYSES on import, like every analysis.
"""
from __future__ import annotations

from typing import Any

from perflab.errors import PerflabError
from perflab.puzzles.evidence.energy import Energy
from perflab.puzzles.evidence.timers import Timers
from perflab.puzzles.questions.registry import Computed, analysis

TIMER_METHODS = ("host", "host_sync", "events")
ENERGY_FIELDS = ("joules_per_call", "joules_per_item", "millijoules_per_item", "mean_power_w", "gflop_per_joule",
                 "ms_per_call", "tflops", "flops_per_call")


def _timers(ev: Any, variant: str) -> dict:
    return Timers().replay(ev, variant)


def _method(data: dict, method: str, variant: str) -> dict:
    if method not in TIMER_METHODS:
        raise PerflabError(f"timer method {method!r} must be one of {', '.join(TIMER_METHODS)}")
    if method not in data["methods"]:
        raise PerflabError(f"the {variant} timings have no {method!r} figures (recorded on {data.get('device')})")
    return data["methods"][method]


def _timer_evidence(data: dict) -> dict[str, str]:
    out = {}
    for part in data["parts"]:
        out[part] = ", ".join(f"{m} {data['methods'][m]['parts'][part]['median_ms']:.3f} ms"
                              for m in TIMER_METHODS if m in data["methods"])
    out["steps timed"] = data.get("steps")
    return out


@analysis
def timer_value(ev: Any, part: str = "", variant: str = "slow", method: str = "host") -> Computed:
    """Median ms of one part (or of the whole step, part = "") by one timing method: host (perf_counter,
    no synchronize), host_sync (perf_counter with synchronize), events (CUDA events)."""
    data = _timers(ev, variant)
    m = _method(data, method, variant)
    if part and part not in m["parts"]:
        raise PerflabError(f"no part {part!r} in the {variant} timings (parts: {', '.join(data['parts'])})")
    value = m["parts"][part]["median_ms"] if part else m["step"]["median_ms"]
    return Computed(round(value, 4), _timer_evidence(data), f"the recorded part timings ({variant}.timers.json)")


@analysis
def timer_top_part(ev: Any, variant: str = "slow", method: str = "host") -> Computed:
    """The part with the largest median time by one timing method."""
    data = _timers(ev, variant)
    m = _method(data, method, variant)
    top = max(data["parts"], key=lambda p: m["parts"][p]["median_ms"])
    return Computed(top, _timer_evidence(data), f"the recorded part timings ({variant}.timers.json)",
                    alternatives=tuple(p for p in data["parts"] if p != top))


@analysis
def timer_ratio(ev: Any, part: str, variant: str = "slow", numerator: str = "events",
                denominator: str = "host") -> Computed:
    """One part's median by one method over its median by another (events / host: how much the host
    clock without synchronize under-reports)."""
    data = _timers(ev, variant)
    num = _method(data, numerator, variant)["parts"][part]["median_ms"]
    den = _method(data, denominator, variant)["parts"][part]["median_ms"]
    if den <= 0:
        raise PerflabError(f"the {denominator} time of {part!r} is zero")
    return Computed(round(num / den, 3), {**_timer_evidence(data), "ratio": f"{num:.4f} / {den:.4f} ms"},
                    f"the recorded part timings ({variant}.timers.json)")


def _energy(ev: Any, variant: str) -> dict:
    return Energy().replay(ev, variant)


def _energy_field(data: dict, field: str) -> float:
    if field not in ENERGY_FIELDS:
        raise PerflabError(f"energy field {field!r} must be one of {', '.join(ENERGY_FIELDS)}")
    value = data["energy"].get(field, data.get(field))
    if value is None:
        raise PerflabError(f"the energy recording has no {field}")
    return float(value)


def _energy_evidence(data: dict) -> dict[str, Any]:
    e, mon = data["energy"], data.get("monitor", {}).get("summary", {})
    return {"J per call": round(e["joules_per_call"], 4), "inferences per call": data["items_per_call"],
            "mJ per inference": round(data["millijoules_per_item"], 4), "ms per call": round(data["ms_per_call"], 4),
            "mean power W (counter)": round(e["mean_power_w"], 1),
            "GFLOP/J": None if data.get("gflop_per_joule") is None else round(data["gflop_per_joule"], 1),
            "calls": e["calls"], "NVML samples": mon.get("samples"), "power source": data.get("power_source"),
            "mean power W (samples)": None if mon.get("mean_power_w") is None else round(mon["mean_power_w"], 1)}


@analysis
def energy_value(ev: Any, field: str = "joules_per_item", variant: str = "slow") -> Computed:
    """One figure of the variant's energy recording: joules_per_call, joules_per_item (per inference),
    millijoules_per_item, mean_power_w, gflop_per_joule, ms_per_call, tflops, flops_per_call."""
    data = _energy(ev, variant)
    return Computed(_energy_field(data, field), _energy_evidence(data),
                    f"the recorded NVML energy counter ({variant}.energy.json)")


@analysis
def energy_ratio(ev: Any, field: str = "joules_per_item", numerator: str = "slow",
                 denominator: str = "solution") -> Computed:
    """A figure of one variant's energy recording over the same figure of the other's."""
    a, b = _energy(ev, numerator), _energy(ev, denominator)
    num, den = _energy_field(a, field), _energy_field(b, field)
    if den == 0:
        raise PerflabError(f"the {denominator} {field} is zero")
    return Computed(num / den, {f"{numerator} {field}": num, f"{denominator} {field}": den},
                    "the recorded NVML energy counter (slow/solution.energy.json)")
