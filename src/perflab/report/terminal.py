"""The doctor's short human summary: the verdict first, then the findings and their evidence."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from perflab.doctor.finding import Finding, Report

_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan", "info": "green"}


def _evidence(f: Finding, limit: int = 3) -> str:
    parts = []
    for k, v in f.evidence.items():
        if isinstance(v, (dict, list)):
            continue
        parts.append(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}")
        if len(parts) == limit:
            break
    return ", ".join(parts)


def render_report(report: Report, console: Console | None = None, *, events: int = 2) -> None:
    console = console or Console()
    src = report.source
    where = f"{src.get('path', '')}  [{src.get('kind', '')}; {src.get('device', '')}"
    if len(src.get("ranks", [])) > 1:
        where += f"; rank {src.get('rank')} of ranks {src.get('ranks')}"
    console.print(Text(where + "]", style="dim"))
    console.print(Text(report.verdict, style="bold"))
    summary = report.analyses.get("summary") if report.analyses else None
    if summary:
        console.print(Text(
            f"steps {summary['steps']}, step {summary['step_time_ms']:.2f} ms, GPU busy {summary['gpu_busy_pct']:.1f}%, "
            f"{summary['kernels_per_step']:.0f} kernels/step (mean {summary['mean_kernel_us']:.1f} µs), "
            f"{summary['syncs']['per_step']:.1f} syncs/step", style="dim"))
    if not report.findings:
        return
    table = Table(show_header=True, header_style="bold", expand=False)
    for col in ("#", "finding", "severity", "gain", "evidence"):
        table.add_column(col, overflow="fold")
    for i, f in enumerate(report.findings, 1):
        proof = _evidence(f)
        if events and f.events:
            proof += "\n" + "\n".join(f"@{e.ts_us / 1e3:.3f} ms {e.name[:50]} ({e.dur_us:.0f} µs)"
                                       for e in f.events[:events])
        table.add_row(str(i), f.id, Text(f.severity, style=_STYLE.get(f.severity, "")), f"{f.gain_pct:.1f}%", proof)
    console.print(table)
    top = report.findings[0]
    console.print(Text("fix: ", style="bold") + Text(top.fix))
