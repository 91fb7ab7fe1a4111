"""Roofline analyses over a recording's Nsight Compute evidence (the roofline-practice puzzle).

Each profiled kernel of `<variant>.csv.gz` is placed on the roofline (analysis/work/roofline.py: FLOPs from the
ncu instruction counters, DRAM bytes, duration) against the ceilings that `perflab bench` measured on the
recording's GPU, shipped as the recording's `ceilings.json`: never the datasheet, and never the ceilings
of the machine that replays the puzzle. They register into questions.ANALYSES like questions_ncu.
"""
from __future__ import annotations

import json
import re
from typing import Any

from perflab.errors import PerflabError
from perflab.puzzles.questions.registry import Computed, analysis
from perflab.puzzles.questions.ncu import _cache, ncu_profile

FIELDS = ("intensity", "bound", "pct_of_roof", "flops_per_s", "dram_bytes_per_s", "ridge", "roof_flops", "flops",
          "dram_bytes", "duration_s")


def recorded_ceilings_doc(ev: Any) -> dict:
    """The recording's ceilings.json (a `perflab bench` result from the recording's GPU), checked to have results."""
    path = ev.folder / "ceilings.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data.get("results"), dict):
            raise ValueError("no results")
    except (OSError, ValueError, AttributeError):
        raise PerflabError(f"no measured ceilings in {path} (copy a `perflab bench` result from the recording's "
                           "GPU there)") from None
    return data


def recorded_ceilings(ev: Any) -> Any:
    """The roofs of the recording's ceilings.json."""
    from perflab.analysis.work.roofline import ceilings_from

    return ceilings_from(recorded_ceilings_doc(ev))


def roofline_model(ev: Any, variant: str) -> Any:
    from perflab.analysis.work.roofline import roofline

    cache = _cache(ev)
    key = ("roofline", variant)
    if key not in cache:
        cache[key] = roofline(ncu_profile(ev, variant), recorded_ceilings(ev))
    return cache[key]


def _source(variant: str) -> str:
    return f"the roofline of the recorded {variant} Nsight Compute report against the measured ceilings (ceilings.json)"


def _point_evidence(p: Any) -> dict[str, Any]:
    return {"kernel": p.name, "FLOP": p.flops, "DRAM bytes": p.dram_bytes,
            "duration µs": round((p.duration_s or 0.0) * 1e6, 2),
            "FLOP/byte": round(p.intensity, 3) if p.intensity is not None else None,
            "TFLOP/s": round(p.flops_per_s / 1e12, 3), "GB/s": round(p.dram_bytes_per_s / 1e9, 1),
            "roof": p.roof, "ridge FLOP/byte": round(p.ridge, 2), "bound": p.bound, "% of roof": p.pct_of_roof}


def pick_point(ev: Any, variant: str, kernel: str) -> Any:
    """The roofline point of the kernel whose name matches `kernel` (a regex); the longest one if several."""
    points = [p for p in roofline_model(ev, variant).points if re.search(kernel, p.name)]
    if not points:
        raise PerflabError(f"no kernel matching {kernel!r} in the recorded {variant} Nsight Compute report")
    return max(points, key=lambda p: p.duration_s or 0.0)


@analysis
def roofline_point(ev: Any, kernel: str, field: str, variant: str = "slow", scale: float = 1.0) -> Computed:
    """One number (or the bound: "memory" | "compute") of a kernel's place on the measured roofline:
    intensity (FLOP per DRAM byte), bound, pct_of_roof, flops_per_s, ridge (FLOP/byte where its roof meets
    the DRAM roof), ..."""
    if field not in FIELDS:
        raise PerflabError(f"roofline field {field!r} is not one of {', '.join(FIELDS)}")
    p = pick_point(ev, variant, kernel)
    value = getattr(p, field)
    if value is None:
        raise PerflabError(f"{p.name} has no {field} in the recorded {variant} report (no DRAM bytes measured)")
    if isinstance(value, (int, float)):
        value = value * scale
    return Computed(value, _point_evidence(p), _source(variant))


@analysis
def roofline_furthest(ev: Any, variant: str = "slow") -> Computed:
    """The kernel furthest below its roof (the lowest % of its attainable performance)."""
    points = sorted(roofline_model(ev, variant).points, key=lambda p: p.pct_of_roof)
    if not points:
        raise PerflabError(f"no kernels in the recorded {variant} Nsight Compute report")
    low = points[0]
    evidence = {p.name: f"{p.pct_of_roof:.0f} % of {p.roof.split(' (')[0]} ({p.bound}-bound)" for p in points}
    return Computed(low.name, evidence, _source(variant), alternatives=tuple(p.name for p in points[1:]))
