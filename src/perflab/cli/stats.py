"""perflab stats FILE: the summaries `nsys stats` prints, from an Nsight Systems export or a Kineto trace."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Optional

import typer

from perflab.errors import PerflabError

STATS_HELP = (
    "Print the summaries an Nsight Systems user knows from `nsys stats`: cuda_gpu_kern_sum, cuda_api_sum, "
    "cuda_gpu_mem_time_sum, cuda_gpu_mem_size_sum and nvtx_sum, with nsys's columns (times in ns, sizes in MB).\n\n"
    "FILE is an Nsight Systems export (.sqlite; .nsys-rep/.qdrep through nsys) or a Kineto trace "
    "(.json/.json.gz; its record_function ranges stand for NVTX ranges). Every process of an export is counted."
)


def register(app: typer.Typer) -> None:
    app.command("stats", help=STATS_HELP)(stats)


def stats(
    path: Path = typer.Argument(..., metavar="FILE", help="Nsight Systems export or Kineto trace"),
    report: Optional[list[str]] = typer.Option(None, "--report", "-r", help="only these reports (repeatable): "
                                               "cuda_gpu_kern_sum, cuda_api_sum, cuda_gpu_mem_time_sum, "
                                               "cuda_gpu_mem_size_sum, nvtx_sum"),
    csv_out: bool = typer.Option(False, "--csv", help="print CSV (each report after a '# name' line)"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object (schema perflab.stats/1)"),
    top: int = typer.Option(0, "--top", min=0, help="rows per report in the terminal (0: all)"),
) -> None:
    """Summaries of an nsys export or Kineto trace (help: STATS_HELP)."""
    from perflab.cli.activity import activity
    from perflab.report.documents import stats_document

    if csv_out and json_out:
        raise PerflabError("--csv and --json: pick one")
    with activity(quiet=json_out or csv_out) as say:
        say(f"reading and summarising {path}")
        doc, trace, tables = stats_document(path, report)
    notes = doc["notes"]
    if json_out:
        typer.echo(json.dumps(doc, indent=1, default=float))
        return
    if csv_out:
        for note in notes:
            typer.echo(f"note: {note}", err=True)
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        for i, t in enumerate(tables):
            if len(tables) > 1:
                buf.write(("\n" if i else "") + f"# {t.name}\n")
            writer.writerow(t.columns)
            writer.writerows(t.rows)
        typer.echo(buf.getvalue(), nl=False)
        return
    _render(path, trace, tables, notes, top)


def _render(path: Path, trace, tables, notes: list[str], top: int) -> None:
    from rich.text import Text

    from perflab.report.console import safe_console

    console = safe_console()  # names come from the file: no markup read, control characters stripped
    kind = trace.meta.get("source", "kineto")
    if trace.meta.get("nsys_version"):
        kind += f" {trace.meta['nsys_version']}"
    console.print(Text(f"{path}  [{kind}; {trace.meta.get('device_name', '')}]", style="dim"))
    for note in notes:
        console.print(Text("note: " + note, style="yellow"))
    for t in tables:
        _render_table(console, t, top)


_DROP_ORDER = ("StdDev (ns)", "StdDev (MB)", "Min (ns)", "Min (MB)", "Max (ns)", "Max (MB)", "Med (ns)", "Med (MB)")
_TEXT_COLUMNS = ("Name", "Operation", "Range")


def _render_table(console, t, top: int) -> None:
    """One report; numbers are never cut: in a narrow terminal the spread columns go first (--csv has all)."""
    from rich.table import Table
    from rich.text import Text

    rows = t.rows if top == 0 else t.rows[:top]
    cells = [[_cell(v, c) for v, c in zip(row, t.columns)] for row in rows]
    label = {c: c.replace(" (ns)", "").replace(" (MB)", "") for c in t.columns}
    width = {c: max([len(r[i]) for r in cells] + [len(label[c])]) for i, c in enumerate(t.columns)}
    shown = list(t.columns)
    dropped = []
    for c in _DROP_ORDER if cells else ():
        need = sum(width[x] + 3 for x in shown if x not in _TEXT_COLUMNS) + 24
        if need <= console.width:
            break
        if c in shown:
            shown.remove(c)
            dropped.append(label[c])
    # the text columns get what the numbers leave (Rich would otherwise shrink every column, numbers to nothing)
    texts = [c for c in shown if c in _TEXT_COLUMNS]
    left = console.width - sum(width[x] + 3 for x in shown if x not in _TEXT_COLUMNS) - 1 - 3 * len(texts)
    text_width = max(12, left // max(len(texts), 1))
    unit = "sizes in MB" if any("(MB)" in c for c in t.columns) else "times in ns"
    table = Table(title=Text(f"{t.title} ({t.name}; {unit})"), show_header=True, header_style="bold", expand=False)
    for c in shown:
        if c in _TEXT_COLUMNS:  # long C++ names stay on one line
            table.add_column(label[c], justify="left", overflow="ellipsis", no_wrap=True, min_width=12,
                             max_width=text_width)
        else:
            table.add_column(label[c], justify="left" if c == "Style" else "right", no_wrap=True, min_width=width[c])
    index = [t.columns.index(c) for c in shown]
    for row in cells:
        table.add_row(*(Text(row[i]) for i in index))
    if not rows:
        table.add_row(*([Text("-")] * len(shown)))
    console.print(table)
    more = [f"and {len(t.rows) - top} more rows"] if top and len(t.rows) > top else []
    if dropped:
        more.append(f"{', '.join(dropped)} left out to fit the terminal (--csv has every column)")
    if more:
        console.print(Text("; ".join(more), style="dim"))


def _cell(v, column: str = "") -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.3f}" if "(MB)" in column else f"{v:,.1f}"
    return str(v)
