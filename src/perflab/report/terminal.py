"""The doctor's short human summary: the verdict first, then the findings and their evidence."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from perflab.analysis.reports.summary import UNEVEN
from perflab.doctor.finding import Finding, Report
from perflab.report.console import safe_console

_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan", "info": "green"}


# where a kernel finding came from, not what decides it (the summary names the kernel)
_CONTEXT = {"kernel", "kernel_time_share_pct", "kernel_gain_pct"}


def _evidence(f: Finding, limit: int = 3, skip: set[str] | frozenset = frozenset()) -> str:
    parts = []
    for k, v in f.evidence.items():
        if isinstance(v, (dict, list)) or k in skip:
            continue
        parts.append(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}")
        if len(parts) == limit:
            break
    return ", ".join(parts)


def render_report(report: Report, console: Console | None = None, *, events: int = 2) -> None:
    console = console or safe_console()
    src = report.source
    kind = src.get("kind", "")
    if (src.get("capture") or {}).get("nsys_version"):
        kind += f" {src['capture']['nsys_version']}"
    where = f"{src.get('path', '')}  [{kind}; {src.get('device', '')}"
    if len(src.get("ranks", [])) > 1:
        where += f"; rank {src.get('rank')} of ranks {src.get('ranks')}"
    console.print(Text(where + "]", style="dim"))
    console.print(Text(report.verdict, style="bold"))
    if (src.get("window") or {}).get("note"):
        console.print(Text("note: " + src["window"]["note"], style="yellow"))
    for note in src.get("notes") or []:  # what the reader left out or could not find
        console.print(Text("note: " + note, style="yellow"))
    if src.get("folder"):
        _render_folder(console, src["folder"])
    analyses = report.analyses or {}
    found_by = (src.get("window") or {}).get("found_by")
    if found_by and found_by != "ProfilerStep ranges" and (src.get("window") or {}).get("kind") != "trace-span":
        console.print(Text("steps: " + found_by, style="dim"))
    summary = analyses.get("summary")
    split = analyses.get("cpu_time_split")
    waits = analyses.get("waits")
    if analyses.get("recording"):  # no GPU timeline: no GPU numbers to print
        rec = analyses["recording"]
        if "profiler_ranges" in rec:
            line = (f"no GPU activity recorded: {rec['launches']} launches, {rec['profiler_ranges']} CUPTI profiler "
                    "ranges, 0 kernels")
        else:  # copies or memsets recorded, kernels not (analysis.steps.recording.unrecorded_kernels)
            line = f"kernels not recorded: {rec['launches']} kernel launches, {rec.get('kernel_records', 0)} kernel records"
        console.print(Text(line, style="dim"))
    elif waits and not split:
        console.print(Text(f"no GPU work; {len(waits['threads'])} threads, waiting {waits['wait_pct']:.1f}% of their "
                           "recorded time", style="dim"))
    elif summary and split:  # a CPU-only trace: where the step thread's time goes, not GPU numbers
        shares = ", ".join(f"{k} {split['pct'].get(k, 0.0):.0f}%" for k in ("ops", "comm", "dataloader", "python"))
        console.print(Text(f"steps {summary['steps']}, step {summary['step_time_ms']:.2f} ms, CPU only; step thread: "
                           f"{shares}", style="dim"))
    elif summary:
        console.print(Text(
            f"steps {summary['steps']}, step {step_words(summary)}, GPU busy {summary['gpu_busy_pct']:.1f}%, "
            f"{summary['kernels_per_step']:.0f} kernels/step (mean {summary['mean_kernel_us']:.1f} µs), "
            f"{summary['syncs']['per_step']:.1f} syncs/step", style="dim"))
    if summary and not split:
        from perflab.report.sol_view import render_sol

        render_sol(console, analyses.get("speed_of_light"))
    from perflab.report.serving_view import serving_lines

    for line in serving_lines(analyses.get("serving")):
        console.print(Text(line, style="bold" if "verdict" in line else "dim"))
    multi = analyses.get("multigpu")
    if multi and multi.get("per_rank"):
        _render_ranks(console, multi)
    if not report.findings:
        return
    ncu = src.get("kind") == "ncu"
    table = Table(show_header=True, header_style="bold", expand=False)
    for col in ("#", "finding", "severity", "gain", "evidence"):
        table.add_column(col, overflow="fold")
    for i, f in enumerate(report.findings, 1):
        proof = _evidence(f, 4, _CONTEXT) if ncu else _evidence(f)
        if events and f.events:
            proof += "\n" + "\n".join(f"@{e.ts_us / 1e3:.3f} ms {e.name[:50]} ({e.dur_us:.0f} µs)"
                                       for e in f.events[:events])
        table.add_row(str(i), f.id, Text(f.severity, style=_STYLE.get(f.severity, "")), f"{f.gain_pct:.1f}%", proof)
    console.print(table)
    top = report.findings[0]
    console.print(Text("fix: ", style="bold") + Text(top.fix))
    if ncu:
        from perflab.report.ncu_terminal import render_ncu

        render_ncu(report, console)


def step_words(summary: dict) -> str:
    """The step time: the median, and the mean and p99 beside it where the steps differ (the per-step figures are
    then read against the mean: a median alone would be shorter than they say)."""
    median, mean = summary["step_time_ms"], summary.get("step_time_mean_ms")
    clock = " on the GPU's clock" if summary.get("clock") == "gpu" else ""
    if mean is None or mean < UNEVEN * median:
        return f"{median:.2f} ms{clock}"
    return f"{median:.2f} ms median, {mean:.2f} ms mean, p99 {summary['step_time_p99_ms']:.2f} ms{clock}"


def _render_folder(console: Console, folder: dict) -> None:
    """Every file of a folder of ranks: read, unreadable (why), not a trace, a duplicate or another job's."""
    counts = ", ".join(f"{n} {status}" for status, n in folder["counts"].items())
    console.print(Text(f"folder: {sum(folder['counts'].values())} files ({counts}); ranks read "
                       f"{folder['ranks_read']} of world size {folder['world_size']}", style="dim"))
    for f in folder["files"]:
        if f["status"] != "read":
            console.print(Text(f"  {f['path'].rsplit('/', 1)[-1]}: {f['status']}: {f.get('reason', '')}", style="dim"))
    if folder.get("note"):
        console.print(Text("note: " + folder["note"], style="yellow"))


def _ms(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def _render_ranks(console: Console, multi: dict) -> None:
    """Per-rank communication evidence of a multi-rank trace folder (analysis.multigpu.collectives)."""
    table = Table(show_header=True, header_style="bold", expand=False,
                  title=f"ranks (world size {multi.get('world_size')}; ms per step)")
    for col in ("rank", "step", "compute", "comm", "overlap %", "exposed comm", "waiting", "collectives"):
        table.add_column(col, justify="right")
    for r in multi["per_rank"]:
        table.add_row(str(r["rank"]), _ms(r["step_ms"]), _ms(r["compute_ms"]), _ms(r["comm_ms"]),
                      f"{r['comm_overlap_pct']:.0f}", _ms(r["exposed_comm_ms"]), _ms(r["wait_ms"]),
                      f"{r['collectives_per_step']:.0f}")
    console.print(table)
    kinds = multi.get("collectives", {}).get("by_kind", {})
    parts = [f"{k} x{d['count']} ({d['bytes'] / 1e6:.1f} MB sized, busbw {d['busbw_gbps']:.1f} GB/s)"
             if d.get("busbw_gbps") is not None else f"{k} x{d['count']} (size not recorded)" for k, d in kinds.items()]
    if parts:
        console.print(Text("collectives: " + "; ".join(parts), style="dim"))
    if multi.get("straggler") is not None:
        console.print(Text(f"last to arrive at collectives: rank {multi['straggler']} "
                           f"(step-time spread {multi['step_ms_spread_pct']:.1f}%)", style="dim"))
