"""How close a trace's GEMMs run to the matmul ceiling measured on the same GPU model (the doctor's
`healthy` evidence: "dominant kernels near the roofline").

FLOPs and kernel time come from analysis/matmul_work.py (recorded shapes); the ceiling from a
`perflab bench` result, used only when it was measured on the trace's GPU and only when measured (never
a datasheet value). Pure: a function of the trace, the windows and the ceilings dict.
"""
from __future__ import annotations

from perflab.analysis.matmul_work import gemm_work
from perflab.analysis.windows import Windows
from perflab.trace.model import Trace


def gemm_vs_ceiling(trace: Trace, windows: Windows, ceilings: dict | None) -> dict | None:
    """{path, tflops, ops, ceiling_tflops, pct_of_ceiling, ceiling_note} for the precision path with the most
    GEMM time, or None when no GEMM has recorded shapes (ceiling and pct None when no usable ceiling)."""
    from perflab.analysis.roofline import ceilings_from

    work = gemm_work(trace, windows)
    if not work["by_path"]:
        return None
    path = max(work["by_path"], key=lambda p: work["by_path"][p]["us"])
    slot = work["by_path"][path]
    out = {"path": path, "tflops": round(slot["flops"] / slot["us"] * 1e-6, 1) if slot["us"] > 0 else None,
           "ops": slot["ops"], "ceiling_tflops": None, "pct_of_ceiling": None}
    device = str(trace.meta.get("device_name") or "")
    measured_on = str(((ceilings or {}).get("manifest") or {}).get("gpu") or "")
    if not ceilings:
        out["ceiling_note"] = "no measured ceilings here: run `perflab bench` on this GPU to compare"
    elif not device or measured_on != device:
        here = device or "the trace's GPU"
        out["ceiling_note"] = f"the saved ceilings were measured on {measured_on or 'an unnamed GPU'}, not on {here}"
    else:
        roof = ceilings_from(ceilings, device).compute.get(path)
        if roof is None or not roof.source.startswith("measured") or out["tflops"] is None:
            out["ceiling_note"] = f"no measured {path} matmul ceiling in the saved ceilings"
        else:
            out["ceiling_tflops"] = round(roof.value * 1e-12, 1)
            out["pct_of_ceiling"] = round(100.0 * out["tflops"] / out["ceiling_tflops"], 1)
            out["ceiling_note"] = roof.source
    return out
