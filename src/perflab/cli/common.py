"""What the puzzle commands share: the console, exit codes, yes/no questions."""
from __future__ import annotations

import typer
from rich.console import Console

from perflab.report.console import safe_console


def console() -> Console:
    return safe_console(highlight=False, soft_wrap=False)


def fail(code: int = 1) -> None:
    # SystemExit, not typer.Exit: the entry point returns SystemExit codes as the exit status.
    raise SystemExit(code)


def confirm(question: str) -> bool:
    """Yes/no on stdin; no answer (end of input) is a no."""
    try:
        return typer.confirm(question, default=False)
    except (typer.Abort, EOFError):
        print()
        return False
