"""A child command in its own process group, stopped whole at its time limit or on Ctrl-C: what `perflab
investigate` (each level's run, its output in a log) and the multi-rank recordings (torchrun and its workers) need."""
from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any, Sequence

# (signal, seconds to wait for the group to exit after it) in order
INTERRUPT_FIRST = ((signal.SIGINT, 10.0), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0))
TERMINATE_FIRST = ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0))


def stop_group(proc: subprocess.Popen, steps: Sequence[tuple[int, float]]) -> None:
    """Send each signal to the process group in turn until it has exited."""
    for sig, grace in steps:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def run_group(cmd: Sequence[str], *, timeout: float | None, steps: Sequence[tuple[int, float]],
              **popen: Any) -> tuple[int, bool]:
    """Run `cmd` in a new session; (its exit status as Popen gives it, timed out). Past `timeout` the group is
    stopped with `steps`; on Ctrl-C it is stopped likewise and the KeyboardInterrupt goes on."""
    proc = subprocess.Popen(list(cmd), start_new_session=True, **popen)
    try:
        return proc.wait(timeout=timeout), False
    except subprocess.TimeoutExpired:
        stop_group(proc, steps)
        return 124, True
    except KeyboardInterrupt:
        stop_group(proc, steps)
        raise


def run_bounded(cmd: Sequence[str], env: dict[str, str], *, log: Path, timeout_s: float | None) -> tuple[int, bool]:
    """Run `cmd` with its output in `log`; (exit status, timed out). The command gets its own process group, so
    at the time limit (or Ctrl-C) it is stopped whole: SIGINT (a Python program then runs its exit handlers, which
    save what was recorded), SIGTERM 10 s later, SIGKILL 5 s after that."""
    with open(log, "ab") as fh:
        try:
            rc, timed_out = run_group(cmd, timeout=timeout_s, steps=INTERRUPT_FIRST, env=env, stdout=fh,
                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        except OSError as exc:
            from perflab.errors import PerflabError

            raise PerflabError(f"cannot run {cmd[0]!r}: {exc.strerror or exc}") from None
    return (128 - rc if rc < 0 else rc), timed_out


def tail(path: Path, chars: int = 2000) -> str:
    """The last `chars` characters of a log (what a record keeps of a program's output)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, os.path.getsize(path) - chars))
            return fh.read().decode(errors="replace")
    except OSError:
        return ""
