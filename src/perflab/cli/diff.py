"""perflab diff BEFORE AFTER: two profiles of the same workload compared."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

DIFF_HELP = (
    "Compare two profiles: step time (median and spread), GPU busy, GPU time per step by kernel type and "
    "by kernel, and the doctor's findings that appeared, disappeared or changed severity.\n\n"
    "BEFORE and AFTER are Kineto traces (.json/.json.gz), folders of per-rank traces, or run:N for the "
    "N-th latest run that `perflab run` recorded (run:1 is the latest)."
)


def register(app: typer.Typer) -> None:
    app.command("diff", help=DIFF_HELP)(diff)


def diff(
    before: str = typer.Argument(..., metavar="BEFORE", help="trace, folder of per-rank traces, or run:N"),
    after: str = typer.Argument(..., metavar="AFTER", help="trace, folder of per-rank traces, or run:N"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object (schema perflab.diff/1)"),
    html: Optional[Path] = typer.Option(None, "--html", help="also write a self-contained HTML report here"),
    plot: Optional[Path] = typer.Option(None, "--plot", help="also draw the comparison (.png, .svg or .pdf)"),
    rank: Optional[int] = typer.Option(None, "--rank", help="which rank of multi-rank trace folders"),
    top: int = typer.Option(10, "--top", min=1, help="kernels to list"),
    force: bool = typer.Option(False, "--force", help="overwrite existing --html/--plot files"),
) -> None:
    """Compare two profiles (help: DIFF_HELP)."""
    from perflab.analysis.compare import compare, load_run
    from perflab.report.html import check_output

    for out in (html, plot):
        if out is not None:
            check_output(out, force=force)  # refuse before the work, not after it
    if plot is not None:
        from perflab.report.diff import check_plot_path

        check_plot_path(plot)
    b = load_run(before, rank=rank)
    a = load_run(after, rank=rank)
    result = compare(b, a, top=top)
    written = []
    if html is not None:
        from perflab.report.html import diff_html, write_output

        written.append(write_output(html, diff_html(result, b.report, a.report), force=force))
    if plot is not None:
        from perflab.report.diff import save_diff_plot

        check_output(plot, force=force)
        written.append(save_diff_plot(result, plot))
    if json_out:
        from perflab.report.diff import diff_json

        typer.echo(diff_json(result))
    else:
        from perflab.report.diff import render_diff

        render_diff(result)
    for path in written:
        typer.echo(f"wrote {path}", err=json_out)
