"""The allocator's history of an unmodified script: `perflab memory record -- CMD`, and the memory numbers every
profiled process reports.

It reaches the script the way `perflab profile` does (perflab.toolkit.profile: a sitecustomize on PYTHONPATH,
settings in $PERFLAB_PROFILE, here with mode "memory"). In the target process, once torch is imported, the
history (`torch.cuda.memory._record_memory_history`, Python stacks) is switched on when CUDA initializes
(`torch.cuda._lazy_call`: no CUDA context is made for a program that makes none); at exit, also after an
exception such as an out-of-memory error, the snapshot is dumped (`torch.cuda.memory._dump_snapshot`). perflab
then converts the pickle to JSON through the restricted reader (trace.snapshot.convert) and deletes it.
"""
from __future__ import annotations

import atexit
import os
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from perflab.errors import PerflabError
from perflab.toolkit.allocator_stats import memory_stats

MAX_ENTRIES = 100_000   # the history is a ring buffer: the last events are kept


def bootstrap(config: dict[str, Any]) -> None:
    """In the target process: record the allocator's history from CUDA's start, dump it at exit."""
    from perflab.toolkit.steps import report_meta, when_torch_imported

    state: dict[str, Any] = {"recording": False, "error": None}
    done = threading.Event()
    snapshot = Path(config["snapshot_dir"]) / f"snapshot-{os.getpid()}.pickle"

    def on_torch(torch: Any) -> None:
        def record() -> None:
            try:
                torch.cuda.memory._record_memory_history(max_entries=int(config.get("max_entries", MAX_ENTRIES)),
                                                         stacks="python")
                state["recording"] = True
            except Exception as exc:
                state["error"] = f"{type(exc).__name__}: {exc}"

        try:
            if torch.cuda.is_available():
                torch.cuda._lazy_call(record)
        except Exception as exc:
            state["error"] = f"{type(exc).__name__}: {exc}"
        atexit.register(finish)  # after torch's own handlers: runs before them, while CUDA still works

    def finish() -> None:
        if done.is_set():
            return
        done.set()
        torch = sys.modules.get("torch")
        meta = {"pid": os.getpid(), "rank": os.environ.get("RANK", os.environ.get("LOCAL_RANK")),
                "torch": torch is not None, "recording": state["recording"], "snapshot": None,
                "error": state["error"], "memory": memory_stats(torch)}
        if state["recording"]:
            try:
                torch.cuda.memory._dump_snapshot(str(snapshot))
                torch.cuda.memory._record_memory_history(enabled=None)
                meta["snapshot"] = str(snapshot)
            except Exception as exc:
                meta["error"] = f"{type(exc).__name__}: {exc}"
        report_meta(config, meta)

    atexit.register(finish)
    when_torch_imported(on_torch)


@dataclass
class MemoryRun:
    returncode: int
    snapshot: Path | None
    processes: list[dict[str, Any]] = field(default_factory=list)

    def explain_missing(self, target: dict[str, str]) -> str:
        """Why no snapshot was written, in one line."""
        from perflab.toolkit.profile import bootstrap_missing

        what = target.get("script") or f"-m {target.get('module')}"
        return (bootstrap_missing(target, self.processes, "recording") or
                f"{what} never initialized CUDA: no CUDA memory to record")


def record_command(cmd: Sequence[str], *, out: Path, target: dict[str, str], max_entries: int = MAX_ENTRIES,
                   force: bool = False, run: Any = None) -> MemoryRun:
    """Run `cmd` recording its target process's allocator history; the snapshot as JSON in `out` (.json or
    .json.gz). With several target processes (torchrun) the first rank's is kept."""
    from perflab.toolkit.profile import run_booted
    from perflab.trace.snapshot import convert

    if max_entries < 1:
        raise PerflabError(f"need --max-entries >= 1 (got {max_entries})")
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="perflab-memory-") as tmp:
        config = {"mode": "memory", "snapshot_dir": tmp, "max_entries": max_entries, **target}
        returncode, processes = run_booted(cmd, config, run)
        processes.sort(key=lambda p: int(p["rank"]) if str(p.get("rank")).isdigit() else -1)
        dumped = [Path(p["snapshot"]) for p in processes if p.get("snapshot") and Path(p["snapshot"]).exists()]
        snapshot = convert(dumped[0], out, force=force) if dumped else None
    return MemoryRun(returncode, snapshot, processes)
