"""The CUDA allocator's history, recorded inside the target process: by `perflab memory record` (mode "memory" of the
bootstrap) and by the profiled run of `perflab investigate`'s level 1, so that level 3 needs no run of its own.

Recording starts when CUDA initializes (`torch.cuda._lazy_call`: no CUDA context is made for a program that makes
none), with Python stacks. While torch.profiler records the steps of level 1 the stacks are left out (the events
are still recorded, so the history has no gap): capturing a stack per allocation would add host time to the very
steps the timeline measures. At exit, also after an out-of-memory error, the snapshot is dumped
(`torch.cuda.memory._dump_snapshot`) when `keep` is "always" or the allocator's numbers show memory pressure
(analysis/gpu_memory/pressure.py); else nothing is written.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

MAX_ENTRIES = 100_000   # the history is a ring buffer: the last events are kept


class History:
    def __init__(self, config: dict[str, Any]):
        self.path = Path(config["snapshot_dir"]) / f"snapshot-{os.getpid()}.pickle"
        self.max_entries = int(config.get("max_entries", MAX_ENTRIES))
        self.keep = config.get("keep", "always")     # always | when-needed
        self.recording = False
        self.quiet_windows = 0
        self.error: str | None = None

    def start(self, torch: Any) -> None:
        try:
            if torch.cuda.is_available():
                torch.cuda._lazy_call(lambda: self._record(torch, "all", first=True))
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"

    def _record(self, torch: Any, context: str | None, first: bool = False) -> None:
        try:
            torch.cuda.memory._record_memory_history(context=context, stacks="python", max_entries=self.max_entries)
            self.recording = self.recording or first
        except Exception as exc:
            self.error = self.error or f"{type(exc).__name__}: {exc}"

    def quiet(self) -> None:
        """Keep recording events, without their stacks (the profiler is recording)."""
        torch = sys.modules.get("torch")
        if self.recording and torch is not None:
            self._record(torch, None)
            self.quiet_windows += 1

    def loud(self) -> None:
        torch = sys.modules.get("torch")
        if self.recording and torch is not None:
            self._record(torch, "all")

    def finish(self, stats: dict[str, Any] | None) -> dict[str, Any]:
        """Dump the snapshot if it is to be kept (see the module doc); what the process reports of it."""
        from perflab.analysis.gpu_memory.pressure import memory_reasons

        out = {"recording": self.recording, "snapshot": None, "error": self.error,
               "stacks_left_out_while_profiling": self.quiet_windows > 0}
        torch = sys.modules.get("torch")
        if not self.recording or torch is None:
            return out
        if self.keep == "always" or memory_reasons(stats):
            try:
                torch.cuda.memory._dump_snapshot(str(self.path))
                out["snapshot"] = str(self.path)
            except Exception as exc:
                out["error"] = f"{type(exc).__name__}: {exc}"
        try:
            torch.cuda.memory._record_memory_history(enabled=None)
        except Exception:
            pass
        return out


class QuietWhileRecording:
    """A profiling session (toolkit/steps.py's _Session) whose recorded steps leave the history's stacks out."""

    def __init__(self, session: Any, history: History):
        self._session, self._history = session, history

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    def begin(self, first_step: int = 0) -> None:
        self._history.quiet()
        self._session.begin(first_step)

    def step(self) -> None:
        self._session.step()
        if self._session.done:
            self._history.loud()

    def close(self) -> Path | None:
        try:
            return self._session.close()
        finally:
            self._history.loud()

    def discard(self) -> None:
        try:
            self._session.discard()
        finally:
            self._history.loud()
