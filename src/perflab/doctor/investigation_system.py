"""Level 1 of an investigation: the timeline. The doctor's system-level verdict on the trace, the speed-of-light
gap per op family, and the kernels worth a closer look at level 2 with the ncu launch that reaches each."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perflab.analysis.work.kernel_targets import KernelTarget, choose, kernel_targets
from perflab.analysis.ncu.ncu_pass import Pass, one_pass_plans
from perflab.analysis.ncu.ncu_plan import MAX_LAUNCHES, LaunchPlan, launch_plan
from perflab.doctor.finding import Report
from perflab.errors import PerflabError

KERNELS = 3            # kernels profiled at level 2 by default
MIN_GAIN_PCT = 3.0     # a kernel is worth an ncu run when it would save this share of the step (the doctor's low bar)


@dataclass
class Level1:
    paths: list[Path] = field(default_factory=list)
    traces: list[Any] = field(default_factory=list)
    report: Report | None = None
    error: str | None = None
    targets: list[KernelTarget] = field(default_factory=list)
    chosen: list[KernelTarget] = field(default_factory=list)
    why: str = ""
    plans: dict[int, LaunchPlan] = field(default_factory=dict)     # chosen target's row -> its launch plan
    passes: list[Pass] = field(default_factory=list)               # the ncu runs that profile them all
    launch_rows: dict[int, int] = field(default_factory=dict)      # chosen target's row -> the launch profiled
    step_us: float = 0.0
    folder: dict[str, Any] | None = None

    @property
    def trace(self) -> Any:
        return self.traces[0] if self.traces else None


def read_level1(paths: list[Path], folder: Path | None = None, *, kernels: int = KERNELS,
                min_gain_pct: float = MIN_GAIN_PCT, max_launches: int = MAX_LAUNCHES,
                program: list[str] | None = None) -> Level1:
    """Load the trace(s) (several: the ranks of one job, rank 0 analysed), run the doctor, rank the kernels. An
    unreadable trace or a failing doctor is recorded in `error`, never raised: the other levels still stand.
    `program`: the command that ran, for the doctor's commands where the trace does not name it."""
    from perflab.doctor import diagnose_trace
    from perflab.doctor.context import Context
    from perflab.trace import kineto

    out = Level1(paths=list(paths))
    if not paths:
        out.error = "no Kineto trace in the folder"
        return out
    try:
        if len(paths) == 1:
            out.traces = [kineto.load(paths[0])]
        else:
            read = kineto.load_folder(folder or paths[0].parent)
            out.traces, out.folder = read.traces, read.accounting()
        for t in out.traces if program else ():
            t.meta["program"] = t.meta.get("program") or list(program)
        ctx = Context.build(out.traces[0], ranks=out.traces)
        out.report = diagnose_trace(out.traces, context=ctx)
        if out.folder:
            out.report.source["folder"] = out.folder
    except PerflabError as exc:
        out.error = str(exc)
        return out
    except Exception as exc:  # the doctor is another layer: its failure must not lose the other levels
        out.error = f"the doctor failed on the trace: {type(exc).__name__}: {exc}"
        return out
    if out.report.analyses.get("recording") or not (out.report.analyses.get("speed_of_light") or {}).get("step"):
        out.why = "no GPU kernels in the trace (a CPU-only program, or the GPU was not recorded)"
        return out
    out.step_us = ctx.step_ms * 1e3
    trace = out.traces[0]
    out.targets = kernel_targets(trace, ctx.windows, ctx.op_work, ctx.ceilings, steps=ctx.n_steps, step_us=out.step_us)
    out.chosen, out.why = choose(out.targets, kernels, min_gain_pct)
    # the launch profiled for each chosen kernel: one like the chosen one, placed so that one ncu run reaches them all
    out.passes = one_pass_plans(trace, [t.row for t in out.chosen])
    out.launch_rows = {m.target_row: m.row for p in out.passes for m in p.members}
    out.plans = {t.row: launch_plan(trace, out.launch_rows.get(t.row, t.row), max_launches=max_launches)
                 for t in out.chosen}
    return out


def system_entry(l1: Level1) -> dict[str, Any]:
    """Level 1's part of the merged report: the verdict, its top finding, and the numbers that decide them."""
    if l1.report is None:
        return {"finding": None, "verdict": l1.error or "no trace", "evidence": {}, "report": None}
    r = l1.report
    a = r.analyses or {}
    s = a.get("summary") or {}
    sol = a.get("speed_of_light") or {}
    top = r.top  # the doctor's own ranking, as `perflab doctor TRACE` prints it
    evidence = {k: s.get(k) for k in ("steps", "step_time_ms", "gpu_busy_pct", "kernels_per_step", "mean_kernel_us")
                if s.get(k) is not None}
    step = sol.get("step") or {}
    if step.get("sol_us") is not None:
        evidence.update({"gpu_ms_per_step": round(step["modelled_gpu_us"] / 1e3, 4),
                         "sol_ms_per_step": round(step["sol_us"] / 1e3, 4),
                         "gpu_pct_of_roof": round(step["pct_of_roof"], 1) if step.get("pct_of_roof") else None})
    families = [{"family": name, "time_us": f["time_us"], "sol_us": f["sol_us"], "gap_us": f.get("gap_us"),
                 "gap_pct_of_step": (100.0 * f["gap_us"] / l1.step_us if l1.step_us and f.get("gap_us") is not None
                                     else None), "pct_of_roof": f.get("pct_of_roof")}
                for name, f in list((sol.get("families") or {}).items())[:8]]
    return {"finding": finding_dict(top, "% of step time"), "verdict": r.verdict, "evidence": evidence,
            "families": families, "sol_sentence": sol.get("sentence"),
            "findings": [{"id": f.id, "level": f.level, "severity": f.severity, "gain_pct": f.gain_pct}
                         for f in r.findings[:6]],
            "notes": list(r.source.get("notes") or []), "report": r.to_dict()}


def finding_dict(f: Any, unit: str) -> dict[str, Any] | None:
    if f is None:
        return None
    return {"id": f.id, "level": f.level, "severity": f.severity, "gain_pct": f.gain_pct, "gain_unit": unit,
            "summary": f.summary or f.id, "fix": f.fix, "evidence": f.evidence}
