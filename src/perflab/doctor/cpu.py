"""Host-side findings for a CPU-only trace (no GPU events): the CPU is the device.

The GPU rules need a device timeline; a CPU-only profile has none. These rules read analysis.idle.cpu_host instead and name the same taxonomy ids with the
same severity scale (share of step time a fix could give back; here the median step's share, so
one step stretched by a busy machine does not decide):

- input-pipeline: the step thread sits in DataLoader iteration;
- host-compute: the step thread runs Python that is not tensor ops, in stretches long enough
  (analysis.idle.cpu_host.LONG_PYTHON_US) not to be the dispatch overhead between small ops;
- comm-not-overlapped: the step thread waits in collectives of a CPU process group (gloo), with
  nothing else to do meanwhile.

`perflab doctor` uses them for any CPU-only trace (a CPU inference or a gloo job); the fix checker
uses them to re-check a CPU-checkable puzzle (requirements.gpu = false) on a machine
without a GPU.
"""
from __future__ import annotations

from perflab.analysis.idle.cpu_host import cpu_time_split
from perflab.analysis.steps.windows import analysis_windows
from perflab.doctor.finding import Finding, Report, rank
from perflab.doctor.registry import significant
from perflab.trace.model import Trace


def cpu_findings(trace: Trace, step: int | None = None) -> list[Finding]:
    split = cpu_time_split(trace, analysis_windows(trace, step))
    pct, evidence = split["typical_pct"], _evidence(split)
    frames = split["top_python_frames"]
    where = f" (mostly in {frames[0]['name']})" if frames else ""
    findings = significant(
        "input-pipeline", pct["dataloader"],
        f"The step thread waits for the DataLoader {pct['dataloader']:.0f}% of step time.",
        evidence,
        "Load data in parallel and ahead of time (DataLoader num_workers>0, prefetch_factor), batch the "
        "per-sample transform into tensor ops on the whole batch, or preprocess once.")
    findings += significant(
        "host-compute", pct["host"],
        f"The step thread runs Python outside tensor ops {pct['host']:.0f}% of step time{where}.",
        {**evidence, "top_python_frames": [f["name"] for f in frames]},
        "Replace the Python loops by tensor ops on the whole batch (vectorize), precompute what does not "
        "change between steps, or move the work off the step's critical path.")
    findings += significant(
        "comm-not-overlapped", pct.get("comm", 0.0),
        f"The step thread waits in collectives ({', '.join(split['comm_ops'][:2]) or 'communication'}) "
        f"{pct.get('comm', 0.0):.0f}% of step time, with no compute beside them.",
        evidence,
        "Overlap the collectives with compute (async_op=True and wait just before the result is used; DDP's "
        "bucketed all-reduce during backward), send fewer and larger messages, or use a faster backend "
        "(NCCL on GPUs; on CPUs, fewer processes per node or shared memory).")
    return rank(findings)


def _evidence(split: dict) -> dict:
    return {"cpu_only": True, "steps": split["steps"], "step_time_ms": split["window_us"] / 1e3 / max(split["steps"], 1),
            "ops_pct": split["pct"]["ops"], "python_pct": split["pct"]["python"],
            "long_python_pct": split["pct"]["host"], "dispatch_pct": split["pct"]["dispatch"],
            "dataloader_pct": split["pct"]["dataloader"], "comm_pct": split["pct"].get("comm", 0.0),
            "wait_pct": split["pct"].get("wait", 0.0),
            "median_step_pct": {k: round(v, 2) for k, v in split["typical_pct"].items()}}


WAITING_PCT = 75.0  # a process whose threads wait this share of their recorded time is not computing


def cpu_report(trace: Trace, report: Report) -> Report:
    """The doctor's report of a trace without GPU activity: a recording that missed the GPU, a process that
    only waits (on requests, other processes, another thread), or a CPU workload and its CPU-side findings."""
    from perflab.analysis.steps.recording import unrecorded_gpu_work
    from perflab.analysis.idle.waits import thread_waits

    unrecorded = unrecorded_gpu_work(trace)
    if unrecorded:
        return Report(source=report.source, verdict=unrecorded["summary"] + " " + unrecorded["fix"], findings=[],
                      analyses={**report.analyses, "recording": unrecorded})
    windows = analysis_windows(trace)
    waits = thread_waits(trace, windows)
    if waits["threads"] and waits["wait_pct"] >= WAITING_PCT:
        names = ", ".join(w["name"] for w in waits["top_waits"][:2])
        verdict = (f"No GPU work in this process (no kernel, copy or launch recorded): it is not what keeps a GPU "
                   f"busy or idle. Its threads wait {waits['wait_pct']:.1f}% of their recorded time ({names}) and "
                   f"compute {waits['busy_us'] / 1e6:,.2f} s in {waits['recorded_us'] / 1e6:,.2f} s of recorded thread time: it waits for "
                   "requests or for other processes. Profile the process that runs the model (a serving engine's "
                   "engine-core or worker process) to see what the GPU does.")
        return Report(source=report.source, verdict=verdict, findings=[],
                      analyses={**report.analyses, "waits": waits})
    findings = cpu_findings(trace)
    verdict = ("CPU-only trace (no GPU activity): " + findings[0].summary if findings else
               "CPU-only trace (no GPU activity): no host-side bottleneck above low.")
    split = cpu_time_split(trace, windows)
    return Report(source=report.source, verdict=verdict, findings=findings,
                  analyses={**report.analyses, "cpu_time_split": split, "waits": waits})
