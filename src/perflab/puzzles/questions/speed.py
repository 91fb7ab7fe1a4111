"""Speed of light from a trace: how close the GEMMs of a recorded variant run to the measured ceiling.

FLOPs come from the recorded shapes of the matmul ops (analysis/work/matmul_work.py), time from their kernels,
and the ceiling is the matmul throughput `perflab bench` measured on the recording's GPU, shipped as the
recording's `ceilings.json` (analysis.work.gemm_roof.measured_matmul_roof): never the datasheet, and never a
ceiling of another GPU. Registered into questions.ANALYSES on import, like every analysis.
"""
from __future__ import annotations

from typing import Any

from perflab.errors import PerflabError
from perflab.puzzles.questions.registry import Computed, analysis
from perflab.puzzles.questions.roofline import recorded_ceilings_doc

FIELDS = ("tflops", "pct_of_ceiling", "step_tflops", "step_pct_of_ceiling", "headroom_pct", "gflop_per_step",
          "gemm_ms_per_step", "ceiling_tflops")


def gemm_work_of(ev: Any, variant: str) -> dict:
    from perflab.analysis.work.matmul_work import gemm_work
    from perflab.analysis.steps.windows import analysis_windows

    trace = ev.trace(variant)
    return gemm_work(trace, analysis_windows(trace))


def _ceiling(ev: Any, path: str, device: str) -> tuple[float, str]:
    """The measured roof of the path (FLOP/s) and where it was measured; refuses a datasheet value and a
    ceiling measured on another GPU than the trace's (analysis.work.gemm_roof.measured_matmul_roof)."""
    from perflab.analysis.work.gemm_roof import measured_matmul_roof

    roof, why_not = measured_matmul_roof(recorded_ceilings_doc(ev), path, device)
    if roof is None:
        raise PerflabError(f"{ev.folder / 'ceilings.json'}: {why_not}")
    return roof.value, roof.source


@analysis
def gemm_speed_of_light(ev: Any, field: str = "pct_of_ceiling", variant: str = "solution", path: str = "") -> Computed:
    """The variant's matrix multiplies against the measured ceiling of their precision (`path`: bf16, fp16,
    tf32, fp32, fp8; default: the path with the most GEMM time). Fields: tflops (FLOPs / GEMM kernel time),
    pct_of_ceiling (that as % of the ceiling), step_tflops and step_pct_of_ceiling (GEMM FLOPs per step /
    step time: the step's speed of light), headroom_pct (the share of the step a GEMM running exactly at the
    ceiling would save), gflop_per_step, gemm_ms_per_step, ceiling_tflops."""
    if field not in FIELDS:
        raise PerflabError(f"speed-of-light field {field!r} is not one of {', '.join(FIELDS)}")
    work = gemm_work_of(ev, variant)
    where = f"the recorded {variant} trace"
    if not work["by_path"]:
        raise PerflabError(f"no matrix multiply with recorded shapes in {where} (profile with record_shapes=True)")
    from perflab.analysis.work.matmul_work import dominant_path

    path = path or dominant_path(work)
    if path not in work["by_path"]:
        raise PerflabError(f"no {path} matrix multiply in {where} (paths: {', '.join(sorted(work['by_path']))})")
    s = ev.summary(variant)
    roof, roof_source = _ceiling(ev, path, s["device"])
    p = work["by_path"][path]
    steps = max(int(s["steps"]), 1)
    step_s = s["step_time_ms"] / 1e3
    flops, gemm_s = p["flops"] / steps, p["us"] * 1e-6 / steps
    ideal_s = flops / roof
    values = {
        "tflops": flops / gemm_s / 1e12 if gemm_s else 0.0,
        "pct_of_ceiling": 100.0 * ideal_s / gemm_s if gemm_s else 0.0,
        "step_tflops": flops / step_s / 1e12 if step_s else 0.0,
        "step_pct_of_ceiling": 100.0 * ideal_s / step_s if step_s else 0.0,
        "headroom_pct": max(0.0, 100.0 * (gemm_s - ideal_s) / step_s) if step_s else 0.0,
        "gflop_per_step": flops / 1e9,
        "gemm_ms_per_step": gemm_s * 1e3,
        "ceiling_tflops": roof / 1e12,
    }
    evidence: dict[str, Any] = {
        "GEMM ops per step": round(p["ops"] / steps, 1), "GFLOP per step": round(values["gflop_per_step"], 2),
        "GEMM kernel ms per step": round(values["gemm_ms_per_step"], 4), "step ms": round(s["step_time_ms"], 4),
        "TFLOP/s while the GEMMs run": round(values["tflops"], 1),
        f"measured {path} ceiling TFLOP/s": round(values["ceiling_tflops"], 1), "ceiling": roof_source,
        "% of the ceiling": round(values["pct_of_ceiling"], 1),
        "step at % of the ceiling (speed of light)": round(values["step_pct_of_ceiling"], 1),
        "a GEMM at the ceiling would save % of the step": round(values["headroom_pct"], 2),
    }
    for shape in work["shapes"][:3]:
        evidence[f"{shape['op']} {shape['dims']}"] = (f"{shape['count']}x in {steps} step(s), "
                                                      f"{shape['flops'] / 1e9:.2f} GFLOP each")
    if work["unattributed_kernels"]:
        evidence["GEMM kernels without a recorded op (not counted)"] = work["unattributed_kernels"]
    return Computed(round(values[field], 3), evidence,
                    f"the GEMMs of {where} (FLOPs from their recorded shapes) against the {path} matmul "
                    "ceiling measured on the recording's GPU (ceilings.json)")
