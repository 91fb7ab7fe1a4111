"""The per-rank pass: one rank's trace reduced to a small, versioned summary (and the rank's own report).

A summary (`perflab.rank-summary/3`, a JSON object) holds what the merge needs of every rank and nothing that
grows with the trace's events: what became of the file, the rank's identity (distributedInfo, first and last
time), its windows and step times, the GPU busy/idle split and idle causes (and busy share), its communication
overlap, every collective (process group, step, sequence number in its group and step, kind, bytes, start,
duration) in columns, and for the collectives inside the windows the stretches of their kernels that no compute
kernel covers (so the merge can price a wait it learns only from the other ranks), and HTA's temporal breakdown
both ways HTA may cut steps. The rules that read every rank (JOB_RULE_MODULES: the multi-GPU rules,
comm-below-roof's transfer times across ranks, pipeline-bubble's stages) run in the merge (multirank/merge.py).
Readers of a newer schema ignore fields they do not know; `extensions` is where a rule that needs more per-rank
numbers adds them, under the name of the analysis it caches on the trace (`pipeline_stage`: this rank's
pipeline stage, doctor/rules/pipeline.py). Version 2 added `gpu_busy_pct`, `extensions.pipeline_stage`, and
the report's compile work and unfit report; version 3 moved the rank's own findings into its report.

The rank's own report (the single-rank doctor's source and analyses, and the rank's own findings with their
evidence, each with the index of its rule so the merge keeps the doctor's order) is needed only for the rank
the job's report is about: the single-rank rules are most of a summary's cost beyond parsing, so they run for
that rank alone, as the single-process doctor runs them. It is made when asked for (with_report, which reads
that one trace again unless cached) and cached beside the summary.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from perflab.analysis.idle.intervals import merge as merge_intervals
from perflab.trace.torch_profiler.kineto_folder import FileEntry, read_rank_file
from perflab.trace.model import Trace

SCHEMA = "perflab.rank-summary/3"
REPORT_SCHEMA = "perflab.rank-report/3"
# rules that read every rank: run by the merge
JOB_RULE_MODULES = frozenset({"perflab.doctor.rules.multigpu", "perflab.doctor.rules.interconnect",
                              "perflab.doctor.rules.pipeline"})
# the fields of analysis.multigpu.collectives.collectives kept per collective (strings go through a table)
NUMBER_FIELDS = ("row", "stream", "ts", "dur_us", "group_size", "bytes", "step", "algbw_gbps", "busbw_gbps")
TEXT_FIELDS = ("name", "kind", "pg", "dtype", "args_from")
_META = ("rank", "world_size", "backend", "pg_count", "nccl_version", "base_time_ns", "device_name", "source")


def summarize_file(path: Path, *, step: int | None = None, name: str | None = None,
                   with_report: bool = False) -> tuple[dict, dict | None]:
    """(summary, the rank's own report if `with_report`) of one file of a folder; a file that gives no rank has
    a summary with only `file` (its status and why) and no report. `name`: the file's name in the job (a staged
    copy's URL)."""
    from perflab.trace import kineto

    name = name or str(path)
    got = read_rank_file(Path(path), kineto.load, name)
    if isinstance(got, FileEntry):
        return {"schema": SCHEMA, "file": got.to_dict()}, None
    got.meta["path"] = name
    return summarize_trace(got, step=step, with_report=with_report)


def summarize_trace(trace: Trace, *, step: int | None = None, with_report: bool = False) -> tuple[dict, dict | None]:
    from perflab.analysis.steps.compile_work import compile_work
    from perflab.analysis.reports.hta_breakdown import idle_time_breakdown, step_symbols, temporal_breakdown
    from perflab.analysis.steps.links import gpu_rows
    from perflab.analysis.steps.records import trace_notes
    from perflab.analysis.steps.windows import step_times, trace_origin
    from perflab.doctor import plain, rank_analyses, report_source, steady_state
    from perflab.doctor.context import Context
    from perflab.doctor.rules.pipeline import stage_of
    from perflab.trace.plausible import note

    ctx = Context.build(trace, step=step, ranks=[trace])
    st = step_times(trace)
    meta = {k: trace.meta.get(k) for k in _META}
    meta.update(path=trace.meta.get("path", ""), ts_min=float(trace.ts.min()), end_max=float(trace.end.max()),
                origin=trace_origin(trace))
    summary = {
        "schema": SCHEMA,
        "file": FileEntry(meta["path"], "read", rank=trace.rank, world_size=int(meta["world_size"] or 1)).to_dict(),
        "meta": meta,
        "data_note": note(trace.meta),
        "capture_notes": trace_notes(trace),
        "window": {"kind": ctx.windows.kind, "steps": list(ctx.windows.steps), "found_by": ctx.windows.found_by,
                   "start": ctx.windows.start.tolist(), "end": ctx.windows.end.tolist(),
                   **({} if ctx.windows.opened is None else {"opened": ctx.windows.opened.tolist()}),
                   **({} if ctx.windows.closed is None else {"closed": ctx.windows.closed.tolist()})},
        "hta": {"step_symbols": sorted(step_symbols([trace])),
                "temporal": {k: temporal_breakdown([trace], f)[0] for k, f in (("filtered", True),
                                                                                  ("unfiltered", False))}},
        "steps": {"times_us": st.tolist(), "step_ms": float(np.median(st)) / 1e3 if st.size else ctx.window_us / 1e3,
                  "n_steps": ctx.n_steps, "window_us": ctx.window_us, "step_time_ms": ctx.step_ms},
        "overlap": ctx.overlap,
        "extensions": {"pipeline_stage": stage_of(trace, ctx.windows)},
    }
    work = compile_work(trace, ctx.windows)
    report: dict = {"schema": REPORT_SCHEMA, "source": report_source(ctx, [trace], work), "compile_work": work}
    unfit = steady_state.unfit(trace, work, report["source"], {"summary": ctx.summary}) if with_report else None
    if unfit is not None:  # no rule judges this rank: its report is that, whatever the other ranks hold
        report["unfit"] = unfit.to_dict()
    if gpu_rows(trace).size == 0:  # a CPU-only rank: its report is the CPU report, no GPU numbers
        from perflab.doctor import diagnose_trace

        summary.update(cpu_only=True, collectives=encode_collectives([], np.zeros(0, bool), []))
        report["cpu_report"] = diagnose_trace([trace], context=ctx).to_dict()
        return plain(summary), plain(report) if with_report else None
    summary.update(_gpu_numbers(ctx))
    if not with_report:  # only the report's rank needs it: the merge asks for it by itself
        return plain(summary), None
    report.update(_own_findings(ctx))
    from perflab.doctor import critical_path_summary

    analyses = {**rank_analyses(ctx, [trace], filter_steps=True), "compile_work": work,
                "critical_path": critical_path_summary(ctx)}
    report["analyses"] = analyses
    report["hta_idle"] = {"filtered": analyses["hta"].pop("idle_time_breakdown"),
                          "unfiltered": idle_time_breakdown([trace], rank=trace.rank, filter_steps=False)}
    analyses["hta"].pop("temporal_breakdown")
    return plain(summary), plain(report)


def _gpu_numbers(ctx) -> dict:
    """What the merge and the job's rules read of every rank with GPU work: busy/idle and the collectives."""
    from perflab.analysis.multigpu.collectives import collectives, compute_spans

    trace, windows = ctx.trace, ctx.windows
    colls = collectives(trace)
    inside = windows.contains(np.array([c["ts"] for c in colls])) if colls else np.zeros(0, bool)
    comp = merge_intervals(*compute_spans(trace, windows))
    gaps = [_uncovered(c["ts"], c["ts"] + c["dur_us"], comp) if ok else None for c, ok in zip(colls, inside)]
    return {
        "busy": ctx.busy, "idle": ctx.gaps.to_dict(), "gpu_busy_pct": ctx.gpu_busy_pct,
        "collectives": encode_collectives(colls, inside, gaps),
        # the host's launch calls bound how far a fix can shorten a step (doctor/fix_bounds.overlap_at_most)
        "launches": {"cpu_launch_us": float(ctx.launches.get("cpu_launch_us") or 0.0)},
    }


def _own_findings(ctx) -> dict:
    """The report rank's own findings (every rule but the job's), each with its rule's index, and `healthy`
    (it stands only when no finding reaches medium: the merge drops it where a job finding does)."""
    from perflab.doctor.registry import rules_for
    from perflab.doctor.rules.system import healthy

    own = [(index, f) for index, rule in enumerate(rules_for("kineto")) if rule.__module__ not in JOB_RULE_MODULES
           for f in rule(ctx)]
    from perflab.doctor.rules.unjudged import unjudged

    note = unjudged(ctx)   # not-judged: the doctor puts it beside the system verdict, or at the head (healthy())
    return {"findings": [{"rule": index, **f.to_dict()} for index, f in own],
            "healthy": [f.to_dict() for f in healthy(ctx, [f for _, f in own])],
            "not_judged": [note.to_dict()] if note is not None else []}


def _uncovered(lo: float, hi: float, comp: tuple[np.ndarray, np.ndarray]) -> list[float]:
    """[s0, e0, s1, e1, ...]: the parts of [lo, hi] no merged compute interval covers."""
    s, e = comp
    i, j = int(np.searchsorted(e, lo, side="right")), int(np.searchsorted(s, hi, side="left"))
    out, at = [], lo
    for a, b in zip(s[i:j].tolist(), e[i:j].tolist()):
        if a > at:
            out += [at, min(a, hi)]
        at = max(at, b)
    if at < hi:
        out += [at, hi]
    return out


def encode_collectives(colls: list[dict], inside: np.ndarray, gaps: list) -> dict:
    """Columns of the collectives (None: null), strings as indices into `strings`."""
    from perflab.analysis.multigpu.collectives import matched_by_order

    strings: dict[str, int] = {}
    out: dict = {f: [c.get(f) for c in colls] for f in NUMBER_FIELDS}
    for f in TEXT_FIELDS:
        out[f] = [None if c.get(f) is None else strings.setdefault(str(c[f]), len(strings)) for c in colls]
    out["strings"] = list(strings)
    counters: dict = {}
    # k-th collective of its process group in its step: the same k on every rank is the same one (None: a call
    # not matched that way, collectives.matched_by_order)
    out["seq"] = []
    for c in colls:
        if not matched_by_order(c):
            out["seq"].append(None)
            continue
        group = (c.get("pg") or "default", c.get("step"))
        out["seq"].append(counters.get(group, 0))
        counters[group] = out["seq"][-1] + 1
    out["in_window"] = [bool(x) for x in inside]
    out["uncovered"] = gaps
    return out
