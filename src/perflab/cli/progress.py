"""perflab progress: what the learner solved (answers, reveals, hints, checks, runs); --json for machines."""
from __future__ import annotations

import json

import typer

from perflab.cli.common import confirm
from perflab.cli.common import console as make_console

SCHEMA = "perflab.progress/1"


def progress_cmd(reset: bool = typer.Option(False, "--reset", help="erase all progress and run history"),
                 yes: bool = typer.Option(False, "--yes", "-y", help="with --reset: do not ask"),
                 as_json: bool = typer.Option(False, "--json", help="one JSON object (schema perflab.progress/1)"),
                 ) -> None:
    """What you solved: answers, hints, checks, runs."""
    from rich.table import Table

    from perflab.puzzles.engine import catalog, progress

    if reset:
        if not yes and not confirm("Erase all progress and run history?"):
            print("kept")
            return
        with progress.ProgressDB() as db:
            db.reset()
        print("progress erased")
        return
    puzzles = catalog.load_catalog()
    with progress.ProgressDB() as db:
        statuses = db.statuses()
        runs = db.runs(limit=20)
    rows = [(p, statuses.get(p.id, progress.PuzzleStatus(p.id))) for p in puzzles]
    if as_json:
        print(json.dumps({"schema": SCHEMA, "puzzles": [st.to_dict(p.question_keys, len(p.hints)) for p, st in rows],
                          "runs": runs}, indent=2))
        return
    t = Table(show_edge=False)
    for col in ("id", "answered", "hints", "check", "runs", "status"):
        t.add_column(col)
    for p, st in rows:
        answered = f"{len(st.right & set(p.question_keys))}/{len(p.questions)}"
        if st.revealed & set(p.question_keys):
            answered += f" ({len(st.revealed & set(p.question_keys))} revealed)"
        check = "passed" if st.checked else (f"{st.checks} failed" if st.checks else "-")
        t.add_row(p.id, answered, f"{st.hints}/{len(p.hints)}", check, str(st.runs), st.label(p.question_keys) or "-")
    make_console().print(t)
