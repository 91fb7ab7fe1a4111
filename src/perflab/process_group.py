"""A child command in its own process group, stopped whole at its time limit or on Ctrl-C: what `perflab
investigate` and the multi-rank recordings (torchrun and its workers) both need."""
from __future__ import annotations

import os
import signal
import subprocess
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
