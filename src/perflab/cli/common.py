"""What the puzzle commands share: the console, exit codes, yes/no questions."""
from __future__ import annotations

import os
import re
from typing import Any

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


_ARTIFACTS = re.compile(r"(?<![\w/.-])artifacts/")


def openable(puzzle: Any, text: str) -> str:
    """A puzzle's text with `artifacts/...` as a path the user can open from where they are: the recording
    lives inside the installed package, not in their working directory."""
    from perflab.paths import display_path

    return _ARTIFACTS.sub(lambda _m: display_path(puzzle.artifacts) + os.sep, text)
