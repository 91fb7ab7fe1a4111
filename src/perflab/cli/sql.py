"""perflab sql FILE "SELECT ...": custom queries over a trace loaded as DuckDB views."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Optional

import typer

from perflab.errors import PerflabError

SQL_HELP = (
    "Run a DuckDB SQL query over a trace: an Nsight Systems export (.sqlite; .nsys-rep through nsys) or a "
    "Kineto trace (.json/.json.gz, or a folder of per-rank traces), loaded into the same views for both: "
    "events, kernels, memcpy, memset, gpu_ops, api, sync, nvtx, cpu_ops, os_runtime, steps, devices, meta, notes "
    "(`perflab sql FILE --schema` lists their columns). COPY (SELECT ...) TO 'file' writes a result (an existing "
    "file only with --force). Needs DuckDB: pip install 'perflab\\[sql]'."
)


def register(app: typer.Typer) -> None:
    app.command("sql", help=SQL_HELP)(sql)


def sql(
    path: Path = typer.Argument(..., metavar="FILE", help="Nsight Systems export or Kineto trace"),
    query: Optional[str] = typer.Argument(None, metavar="QUERY", help="a SELECT over the views"),
    csv_out: bool = typer.Option(False, "--csv", help="print CSV"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object (schema perflab.sql/1)"),
    schema: bool = typer.Option(False, "--schema", help="list the views and their columns"),
    nvtx_steps: str = typer.Option("auto", "--nvtx-steps", metavar="REGEX|auto|none",
                                   help="Nsight Systems: the NVTX ranges that are steps (see perflab doctor --help)"),
    limit: int = typer.Option(200, "--limit", min=0, help="rows shown in the terminal (0: all)"),
    force: bool = typer.Option(False, "--force", help="let COPY ... TO / EXPORT DATABASE overwrite existing files"),
) -> None:
    """Query a trace with SQL (help: SQL_HELP)."""
    from perflab.cli.activity import activity
    from perflab.report.documents import sql_document

    if csv_out and json_out:
        raise PerflabError("--csv and --json: pick one")
    with activity(quiet=json_out or csv_out) as say:
        say(f"reading {path} and running the query")
        doc, written = sql_document(path, query, schema=schema, force=force, nvtx_steps=nvtx_steps)
    for out in written:
        typer.echo(f"wrote {out}", err=True)
    if json_out:
        typer.echo(json.dumps(doc, default=str))
        return
    cols, rows, notes = doc["columns"], doc["rows"], doc["notes"]
    for note in notes:
        typer.echo(f"note: {note}", err=True)
    if csv_out:
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(cols)
        writer.writerows(rows)
        typer.echo(buf.getvalue(), nl=False)
        return
    _render(cols, rows, limit)


def _render(cols: list[str], rows: list[tuple], limit: int) -> None:
    from perflab.report.console import safe_console
    from rich.table import Table
    from rich.text import Text

    console = safe_console()  # cells come from the file: no markup, no control characters
    table = Table(show_header=True, header_style="bold", expand=False)
    for c in cols:
        table.add_column(c, overflow="fold")
    shown = rows if limit == 0 else rows[:limit]
    for row in shown:
        table.add_row(*(Text(_cell(v)) for v in row))
    console.print(table)
    console.print(Text(f"{len(rows)} row(s)" + (f", {len(shown)} shown (--limit)" if len(shown) < len(rows) else ""),
                       style="dim"))


def _cell(v) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 1e6 else f"{v:,.0f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)
