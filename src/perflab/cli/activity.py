"""What a long command is doing, on stderr: a Rich spinner with the stage and the time so far, shown only when
stderr is a terminal and the command prints no JSON, and only once the work has lasted a moment (a quick
command stays as quiet as before). Piped, or with --json, nothing is printed.

    with activity(quiet=json_out) as say:
        say(f"reading {path}")
        trace = load(path)
        say("analysing")
"""
from __future__ import annotations

import contextlib
import sys
import threading
from typing import Callable, Iterator

SHOW_AFTER_S = 0.7


def on_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


@contextlib.contextmanager
def activity(*, quiet: bool = False, after_s: float | None = None) -> Iterator[Callable[[str], None]]:
    if quiet or not on_terminal():
        yield lambda _stage: None
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from perflab.report.console import safe_console

    bar = Progress(SpinnerColumn(), TextColumn("{task.description}", markup=False), TimeElapsedColumn(),
                   console=safe_console(stderr=True, force_terminal=True), transient=True)
    task = bar.add_task("", total=None)
    lock = threading.Lock()
    state = {"started": False, "done": False}

    def start() -> None:
        with lock:
            if not state["done"]:
                bar.start()
                state["started"] = True

    timer = threading.Timer(SHOW_AFTER_S if after_s is None else after_s, start)
    timer.daemon = True
    timer.start()
    try:
        yield lambda stage: bar.update(task, description=stage)
    finally:
        timer.cancel()
        with lock:
            state["done"] = True
            if state["started"]:
                bar.stop()
