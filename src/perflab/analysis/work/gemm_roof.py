"""How close a trace's GEMMs run to the matmul ceiling measured on the same GPU model (the doctor's
`healthy` evidence: "dominant kernels near the roofline"; the speed-of-light puzzle's questions).

FLOPs and kernel time come from analysis/work/matmul_work.py (recorded shapes); the ceiling from a
`perflab bench` result, used only when it was measured on the trace's GPU and only when measured (never
a datasheet value). Pure: a function of the trace, the windows and the ceilings dict.
"""
from __future__ import annotations

from typing import Any

from perflab.analysis.work.matmul_work import dominant_path, gemm_work
from perflab.analysis.steps.windows import Windows
from perflab.trace.model import Trace


def measured_matmul_roof(ceilings: dict | None, path: str, device: str) -> tuple[Any, str]:
    """(the `path` matmul Roof that `perflab bench` measured on `device`, "") or (None, why it cannot be used):
    no ceilings, ceilings of another (or an unnamed) GPU, or no measured value for that path."""
    from perflab.analysis.work.roofline import ceilings_from

    if not ceilings:
        return None, "no measured ceilings here: run `perflab bench` on this GPU to compare"
    measured_on = str((ceilings.get("manifest") or {}).get("gpu") or "")
    if not device or measured_on != device:
        return None, (f"the ceilings were measured on {measured_on or 'an unnamed GPU'}, the trace was recorded on "
                      f"{device or 'an unnamed GPU'}: measure them on the trace's GPU (`perflab bench`)")
    roof = ceilings_from(ceilings, device).compute.get(path)
    if roof is None or not roof.source.startswith("measured"):
        return None, f"no measured {path} matmul ceiling in the ceilings"
    return roof, ""


def gemm_vs_ceiling(trace: Trace, windows: Windows, ceilings: dict | None) -> dict | None:
    """{path, tflops, ops, ceiling_tflops, pct_of_ceiling, ceiling_note} for the precision path with the most
    GEMM time, or None when no GEMM has recorded shapes (ceiling and pct None when no usable ceiling)."""
    work = gemm_work(trace, windows)
    if not work["by_path"]:
        return None
    path = dominant_path(work)
    slot = work["by_path"][path]
    out = {"path": path, "tflops": round(slot["flops"] / slot["us"] * 1e-6, 1) if slot["us"] > 0 else None,
           "ops": slot["ops"], "ceiling_tflops": None, "pct_of_ceiling": None}
    roof, why_not = measured_matmul_roof(ceilings, path, str(trace.meta.get("device_name") or ""))
    if roof is None or out["tflops"] is None:
        out["ceiling_note"] = why_not or "no GEMM time to compare"
    else:
        out["ceiling_tflops"] = round(roof.value * 1e-12, 1)
        out["pct_of_ceiling"] = round(100.0 * out["tflops"] / out["ceiling_tflops"], 1)
        out["ceiling_note"] = roof.source
    return out
