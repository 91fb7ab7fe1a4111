"""perflab taxonomy [ID]: the bottleneck ids the doctor and the puzzles speak, and what each means."""
from __future__ import annotations

from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    app.command("taxonomy")(taxonomy_cmd)


def taxonomy_cmd(
    tid: Optional[str] = typer.Argument(None, metavar="ID", help="one id (e.g. host-sync); all of them when left out"),
    json_out: bool = typer.Option(False, "--json", help="print JSON (schema perflab.taxonomy/1)"),
) -> None:
    """The bottleneck taxonomy: each id's level, meaning, typical evidence and usual fix."""
    import json

    from perflab.doctor.taxonomy import entries, lookup, plain

    chosen = [lookup(tid)] if tid is not None else list(entries().values())
    puzzles = _puzzles_by_tag() if tid is not None else {}
    if json_out:
        typer.echo(json.dumps({"schema": "perflab.taxonomy/1", "ids": [
            {"id": e.id, "level": e.level, "meaning": plain(e.meaning), "evidence": plain(e.evidence), "fix": e.fix,
             **({"puzzles": puzzles.get(e.id, [])} if tid is not None else {})} for e in chosen]}))
        return
    from rich.table import Table
    from rich.text import Text

    from perflab.cli.common import console

    out = console()
    if tid is None:
        table = Table(show_header=True, header_style="bold", expand=False)
        for col in ("id", "level", "what it means"):
            table.add_column(col, overflow="fold")
        for e in chosen:
            table.add_row(e.id, e.level, Text(plain(e.meaning)))
        out.print(table)
        out.print(Text("perflab taxonomy ID prints one id's evidence and fix", style="dim"))
        return
    e = chosen[0]
    out.print(Text(f"{e.id}  ({e.level} level)", style="bold"))
    for label, value in (("means", e.meaning), ("evidence", e.evidence), ("fix", e.fix)):
        out.print(Text(f"{label}: ", style="bold") + Text(plain(value)))
    if puzzles.get(e.id):
        out.print(Text("puzzles: ", style="bold") + Text(", ".join(puzzles[e.id]) + " (perflab show ID)"))


def _puzzles_by_tag() -> dict[str, list[str]]:
    """The puzzles tagged with each id; none when the catalog cannot be read (the taxonomy still prints)."""
    from perflab.errors import PerflabError
    from perflab.puzzles.engine.catalog import load_catalog

    try:
        catalog = load_catalog()
    except PerflabError:
        return {}
    out: dict[str, list[str]] = {}
    for p in catalog:
        for tag in p.taxonomy:
            out.setdefault(tag, []).append(p.id)
    return out
