"""The doctor: recognize an artifact, run the rules for its kind, rank the findings.

    from perflab.doctor import diagnose
    report = diagnose("trace.json.gz")          # or a folder of per-rank traces, or a Trace
    report.top.id, report.to_dict()
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

from perflab.doctor.finding import Finding, Report
from perflab.doctor.finding import rank as rank_findings
from perflab.doctor.shared_time import share_lost_time
from perflab.errors import PerflabError, UnreadableInput
from perflab.trace import sniff

if TYPE_CHECKING:  # numpy comes with the first trace read, not with `import perflab.doctor` (the puzzle catalog)
    from perflab.trace.model import Trace

__all__ = ["diagnose", "diagnose_trace", "Report", "Finding"]

_OTHER_READERS = {
    sniff.NCU: ("perflab.doctor.ncu", "diagnose_ncu", "Nsight Compute"),
    sniff.NCU_CSV: ("perflab.doctor.ncu", "diagnose_ncu", "Nsight Compute"),
    sniff.MEMORY: ("perflab.doctor.memory", "diagnose_memory", "memory snapshot"),
    sniff.SERVING: ("perflab.doctor.serving", "diagnose_serving", "serving record"),
}


def diagnose(path_or_trace: str | Path | Trace, *, rank: int | None = None, step: int | None = None,
             nvtx_steps: str | None = "auto", marker: str | None = None, model=None) -> Report:
    """Diagnose a Kineto trace (file, folder of ranks, or loaded Trace), an Nsight Systems export (.sqlite, or
    .nsys-rep/.qdrep through `nsys export`), an ncu report, a memory snapshot or a serving record (perflab's engine
    log, a vLLM or SGLang serving benchmark result). `nvtx_steps`: which NVTX
    ranges of an nsys export are steps ("auto", a regular expression, or None). `marker`: a regular expression
    naming a serving loop's iteration ranges (analysis/steps/iteration_markers.py); `model`: the model's
    description (analysis/work/model_config.py: a ModelConfig or a `--model` spec), which prices each iteration."""
    from perflab.trace.model import Trace

    serving = _serving_options(marker, model)
    if isinstance(path_or_trace, Trace):
        return diagnose_trace([_with(path_or_trace, serving)], rank=rank, step=step)
    path = Path(path_or_trace)
    kind = sniff.sniff(path)
    if kind in _OTHER_READERS:
        return _dispatch(kind, path)
    if kind in (sniff.NSYS, sniff.NSYS_REP):
        from perflab.doctor import nsys
        from perflab.trace.nsight_systems.nsys_rep import sqlite_for

        traces = nsys.load(sqlite_for(path) if kind == sniff.NSYS_REP else path, nvtx_steps=nvtx_steps)
        traces = [_with(t, serving) for t in traces]
        return nsys.no_gpu_work(traces[0]) or diagnose_trace(traces, rank=rank, step=step)
    if kind == sniff.SQLITE:
        raise UnreadableInput(f"{path}: an SQLite file, but not an Nsight Systems export (give the output of "
                              "`nsys export --type sqlite`)")
    if kind == sniff.UNKNOWN:
        raise UnreadableInput(f"{path}: not a Kineto trace, an Nsight Systems export, an Nsight Compute report, a "
                              "memory snapshot or a serving record")
    from perflab.trace.kineto import load_folder, load_ranks

    if not path.is_dir():
        return diagnose_trace([_with(t, serving) for t in load_ranks(path)], rank=rank, step=step)
    folder = load_folder(path)
    report = diagnose_trace([_with(t, serving) for t in folder.traces], rank=rank, step=step)
    report.source["folder"] = folder.accounting()
    return report


def _serving_options(marker: str | None, model) -> dict:
    """What `marker` and `model` put in each trace's meta (checked here, before any file is read)."""
    from perflab.analysis.steps.iteration_markers import user_marker
    from perflab.analysis.steps.iterations import MARKER_KEY
    from perflab.doctor.context import MODEL_KEY

    out = {}
    if marker:
        user_marker(marker)   # a bad expression is one clear line now, not a failure inside the analysis
        out[MARKER_KEY] = marker
    if model is not None:
        if isinstance(model, str):
            from perflab.analysis.work.model_config import load_model

            model = load_model(model)
        out[MODEL_KEY] = model
    return out


def _with(trace: Trace, options: dict) -> Trace:
    trace.meta.update(options)
    return trace


def _dispatch(kind: str, path: Path) -> Report:
    module_name, func, what = _OTHER_READERS[kind]
    try:
        module = importlib.import_module(module_name)
        reader = getattr(module, func)
    except (ImportError, AttributeError):
        raise PerflabError(f"{path} is a {what} file, but the {what} reader is not available yet") from None
    return reader(path)


def data_notes(traces: list[Trace]) -> list[str]:
    """What the reader had to leave out of each trace (trace/plausible.py), for every output to say."""
    from perflab.trace.plausible import note

    prefix = len(traces) > 1
    return [f"rank {t.rank}: {n}" if prefix else n for t in traces if (n := note(t.meta))]


def diagnose_trace(traces: list[Trace], *, rank: int | None = None, step: int | None = None,
                   context=None) -> Report:
    """The doctor's report on one rank of `traces`; `context`: a doctor.context.Context already built for it (its
    analyses are then computed once for the caller and the doctor)."""
    from perflab.analysis.steps.compile_work import compile_work
    from perflab.analysis.steps.links import gpu_rows
    from perflab.doctor import steady_state
    from perflab.doctor.context import Context
    from perflab.doctor.registry import run_rules
    from perflab.doctor.rules.system import healthy

    trace = _pick_rank(traces, rank)
    ctx = context if context is not None else Context.build(trace, step=step, ranks=traces)
    work = compile_work(trace, ctx.windows)
    source = report_source(ctx, traces, work)
    unfit = steady_state.unfit(trace, work, source, {"summary": ctx.summary})
    if unfit is not None:  # kernels not recorded, or a window of compilation: no rule can judge it
        return unfit
    if gpu_rows(trace).size == 0:  # a CPU-only profile: the CPU is the device (doctor/cpu.py)
        from perflab.doctor.cpu import cpu_report

        return cpu_report(trace, Report(source=source, verdict="", findings=[],
                                        analyses={"summary": ctx.summary, "compile_work": work}))
    findings = ranked_findings(ctx)
    findings = healthy(ctx, findings) + findings  # nothing above low: `healthy` is the headline, low notes follow
    findings += beside_system_verdict(ctx, findings)
    analyses = {**rank_analyses(ctx, traces), "compile_work": work, "critical_path": critical_path_summary(ctx)}
    if ctx.serving is not None:
        from perflab.doctor.rules.serving_trace import serving_verdict

        analyses["serving"] = {**ctx.serving, "verdict": serving_verdict(ctx.serving, findings)}
    from perflab.doctor.rules.multigpu import multirank

    multi = multirank(ctx)
    if multi:
        from perflab.analysis.multigpu.collectives import top_collectives

        analyses["multigpu"] = {**multi, "top_collectives": top_collectives(trace)}
    text = verdict(findings)
    if ctx.streams_overlap:
        text += " " + analyses["critical_path"]["note"]
    return Report(source=source, verdict=text, findings=findings, analyses=plain(analyses))


def beside_system_verdict(ctx, findings: list) -> list:
    """`not-judged` after the system findings that lead: most of the GPU time unpriced, whatever the system level
    says (rules/unjudged.py); [] where it heads the report already or the time was priced."""
    from perflab.doctor.rules.unjudged import unjudged

    if any(f.id == "not-judged" for f in findings):
        return []
    note = unjudged(ctx)
    return [note] if note is not None else []


def critical_path_summary(ctx) -> dict:
    """The step's critical path (analysis/idle/critical_path.py) for the report: the chain that sets the step, its time
    per lane and per category; where several streams run at once, a sentence that names it."""
    cp = ctx.critical_path
    out = {**cp.to_dict(), "streams_overlap": bool(ctx.streams_overlap)}
    if ctx.streams_overlap and cp.by_lane:
        lane = cp.setter()
        on_lane = 100.0 * cp.by_lane[lane] / (sum(cp.by_lane.values()) + cp.waiting_us)
        out["note"] = (f"Several streams run at once: the chain on {lane} sets the step time ({on_lane:.0f}% of the "
                       "critical path); kernel gains count only their time on that path.")
    return out


def ranked_findings(ctx) -> list:
    """The rules' findings for the context's rank, ranked: findings that claim the same lost time share it, and
    a kernel's below-roof gain never ranks above a larger system cause."""
    from perflab.doctor.registry import run_rules
    from perflab.doctor.rules.roof import after_system_causes

    idle = 100.0 - ctx.gpu_busy_pct
    return after_system_causes(rank_findings(share_lost_time(rank_findings(run_rules(ctx)), idle)), idle)


def report_source(ctx, traces: list[Trace], work: dict | None = None) -> dict:
    """The report's `source` for the context's rank of `traces` (the notes of every rank; `work`: the window's
    compile work, analysis.steps.compile_work, computed here when not given)."""
    from perflab.analysis.steps.compile_work import compile_work

    trace = ctx.trace
    source = {"path": trace.meta.get("path", ""), "kind": trace.meta.get("source", "kineto"),
              "device": trace.meta.get("device_name", ""), "ranks": [t.rank for t in traces], "rank": trace.rank,
              "window": {"kind": ctx.windows.kind, "steps": list(ctx.windows.steps), "found_by": ctx.windows.found_by,
                         **_cut_short(trace, ctx.windows)}}
    _capture_facts(trace, source)
    work = work if work is not None else compile_work(trace, ctx.windows)
    notes = data_notes(traces) + source.get("notes", []) + ([work["summary"]] if work["summary"] else [])
    if notes:
        source["notes"] = notes
    return source


def rank_analyses(ctx, traces: list[Trace], filter_steps: bool | None = None) -> dict:
    """The numbers behind the context's rank's findings, all but the multi-GPU ones (HTA's breakdowns over
    `traces`; `filter_steps`: hta_breakdown.hta_view's)."""
    from perflab.analysis.reports.hta_breakdown import idle_time_breakdown, temporal_breakdown
    from perflab.analysis.idle.lanes import stream_lanes
    from perflab.analysis.work.speed_of_light import summarized

    trace = ctx.trace
    return {
        "summary": ctx.summary,
        "idle": ctx.gaps.to_dict(),
        "launches": ctx.launches,
        "kernels": ctx.kernels,
        "copies": ctx.copies,
        "syncs": ctx.syncs,
        "overlap": ctx.overlap,
        "busy": ctx.busy,
        "timeline": stream_lanes(trace, ctx.windows),
        "speed_of_light": summarized(ctx.sol),
        "hta": {"temporal_breakdown": temporal_breakdown(traces, filter_steps),
                "idle_time_breakdown": idle_time_breakdown(traces, rank=trace.rank, filter_steps=filter_steps)},
    }


def _capture_facts(trace: Trace, source: dict) -> None:
    """Notes on the completeness of the records (every format), and an nsys export's capture facts."""
    from perflab.analysis.steps.records import trace_notes

    notes = trace_notes(trace)
    if trace.meta.get("source") == "nsys":
        from perflab.trace.nsight_systems.nsys_capture import capture_summary

        source["capture"] = capture_summary(trace)
    if notes:
        source["notes"] = notes


def _pick_rank(traces: list[Trace], rank: int | None) -> Trace:
    if rank is None:
        return traces[0]
    for t in traces:
        if t.rank == rank:
            return t
    raise PerflabError(f"no trace for rank {rank} (ranks: {', '.join(str(t.rank) for t in traces)})")


def _cut_short(trace: Trace, windows) -> dict:
    """A note when the ProfilerStep ranges last far longer than what was recorded in them (prof.step() called
    long after the work, profiling stopped inside a step): the analysis covers only the recorded part."""
    import numpy as np

    from perflab.analysis.steps.windows import profiler_steps

    if windows.kind != "steps":
        return {}
    steps = profiler_steps(trace)
    keep = np.isin(steps.number, np.asarray(windows.steps, dtype=np.int64))
    if not keep.any() or steps.on_gpu:   # on the GPU's clock the host's ranges are short by design
        return {}
    annotated = float((steps.end[keep] - steps.start[keep]).sum())
    if annotated <= 0 or windows.total >= 0.5 * annotated:
        return {}
    return {"analysed_ms": round(windows.total / 1e3, 3), "annotated_ms": round(annotated / 1e3, 3),
            "note": f"the ProfilerStep ranges last {annotated / 1e3:,.2f} ms but their recorded activity ends after "
                    f"{windows.total / 1e3:,.2f} ms: percentages are of the recorded part"}


def verdict(findings: list[Finding]) -> str:
    if not findings:
        return "Nothing to report."
    top = findings[0]
    text = top.summary or top.id
    others = [f.id for f in findings[1:] if f.severity in ("high", "medium")]
    if others:
        text += f" Also: {', '.join(others)}."
    unjudged = next((f for f in findings[1:] if f.id == "not-judged"), None)
    if unjudged is not None:
        text += (f" Kernels not judged: {unjudged.evidence.get('unjudged_gpu_time_pct', 0):.0f}% of the GPU time has "
                 "no price (see not-judged).")
    return text


def plain(value):
    """numpy scalars and arrays -> plain Python, so the report serializes as JSON."""
    import numpy as np

    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return [plain(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and value != value:
        return None
    return value
