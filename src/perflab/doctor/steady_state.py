"""Traces that cannot support a steady-state verdict: kernels launched but not recorded, or a window that is
mostly compilation. The doctor says so and how to record a better trace, instead of reading them as host work."""
from __future__ import annotations

from perflab.analysis.steps.compile_work import RECORD_AFTER_COMPILE
from perflab.analysis.steps.recording import unrecorded_kernels
from perflab.doctor.finding import Report
from perflab.trace.model import Trace


def unfit(trace: Trace, work: dict, source: dict, analyses: dict) -> Report | None:
    """The report for a trace no rule should judge; None when the trace can be judged. `work`: compile_work of
    the analysed window."""
    missing = unrecorded_kernels(trace)
    if missing:
        return Report(source=source, verdict=f"{missing['summary']} {missing['fix']}", findings=[],
                      analyses={**analyses, "recording": missing, "compile_work": work})
    if work["mostly_compile"]:
        verdict = (f"The analysed window is compilation, not the program: {work['summary']}; no bottleneck is named "
                   f"from it. {RECORD_AFTER_COMPILE}")
        return Report(source=source, verdict=verdict, findings=[], analyses={**analyses, "compile_work": work})
    return None
