"""perflab sql FILE "SELECT ...": custom queries over a trace loaded as DuckDB views."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from perflab.errors import PerflabError

SQL_HELP = (
    "Run a DuckDB SQL query over a trace: an Nsight Systems export (.sqlite; .nsys-rep through nsys) or a "
    "Kineto trace (.json/.json.gz, or a folder of per-rank traces), loaded into the same views for both: "
    "events, kernels, memcpy, memset, gpu_ops, api, sync, nvtx, cpu_ops, os_runtime, steps, devices, meta, notes "
    "(`perflab sql FILE --schema` lists their columns). The query runs in DuckDB's sandbox: it reads only those "
    "views and writes no file (COPY, EXPORT, ATTACH, read_csv, glob and SET are refused); --out FILE writes the "
    "result (.csv, .json or .parquet; an existing file only with --force). Needs DuckDB: pip install 'perflab\\[sql]'."
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
    limit: Optional[int] = typer.Option(None, "--limit", min=0, metavar="N",
                                        help="fetch at most N rows (0: all; default 200 in the terminal, all with "
                                             "--csv, --json or --out)"),
    out: Optional[Path] = typer.Option(None, "--out", metavar="FILE",
                                       help="write the result to FILE (.csv, .json or .parquet)"),
    force: bool = typer.Option(False, "--force", help="let --out replace an existing file"),
) -> None:
    """Query a trace with SQL (help: SQL_HELP)."""
    from perflab.cli.activity import activity
    from perflab.report.documents import sql_document

    if csv_out and json_out:
        raise PerflabError("--csv and --json: pick one")
    terminal = not (csv_out or json_out or out)
    fetch = (TERMINAL_ROWS if terminal else None) if limit is None else (limit or None)
    with activity(quiet=json_out or csv_out) as say:
        say(f"reading {path} and running the query")
        doc, written = sql_document(path, query, schema=schema, out=out, force=force, limit=fetch,
                                    nvtx_steps=nvtx_steps)
    for done in written:
        typer.echo(f"wrote {done} ({len(doc['rows'])} row(s))", err=True)
    if json_out:
        typer.echo(json.dumps(doc, default=str))
        return
    cols, rows, notes = doc["columns"], doc["rows"], doc["notes"]
    for note in notes:
        typer.echo(f"note: {note}", err=True)
    if csv_out:
        from perflab.report.sql_output import csv_text

        typer.echo(csv_text(cols, rows), nl=False)
        return
    if not written:
        _render(cols, rows, doc["more_rows"])


TERMINAL_ROWS = 200


def _render(cols: list[str], rows: list[tuple], more: bool) -> None:
    from perflab.report.console import safe_console
    from rich.table import Table
    from rich.text import Text

    console = safe_console()  # cells come from the file: no markup, no control characters
    table = Table(show_header=True, header_style="bold", expand=False)
    for c in cols:
        table.add_column(c, overflow="fold")
    for row in rows:
        table.add_row(*(Text(_cell(v)) for v in row))
    console.print(table)
    console.print(Text(f"{len(rows)} row(s)" + (" shown; more not fetched (--limit N, 0 for all)" if more else ""),
                       style="dim"))


def _cell(v) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 1e6 else f"{v:,.0f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)
