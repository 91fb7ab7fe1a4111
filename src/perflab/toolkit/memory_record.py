"""The allocator's history of an unmodified script: `perflab memory record -- CMD`, and the memory numbers every
profiled process reports.

It reaches the script the way `perflab profile` does (perflab.toolkit.profile: a sitecustomize on PYTHONPATH,
settings in $PERFLAB_PROFILE, here with mode "memory"). In the target process the history is recorded from CUDA's
start and dumped at exit, also after an exception such as an out-of-memory error (toolkit/memory_history.py).
perflab then converts the pickle to JSON through the restricted reader (trace.snapshot.convert) and deletes it.
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
from perflab.toolkit.memory_history import MAX_ENTRIES


def bootstrap(config: dict[str, Any]) -> None:
    """In the target process: record the allocator's history from CUDA's start, dump it at exit."""
    from perflab.toolkit.memory_history import History
    from perflab.toolkit.steps import report_meta, when_torch_imported

    history = History({**config, "keep": "always"})
    done = threading.Event()

    def on_torch(torch: Any) -> None:
        history.start(torch)
        atexit.register(finish)  # after torch's own handlers: runs before them, while CUDA still works

    def finish() -> None:
        if done.is_set():
            return
        done.set()
        torch = sys.modules.get("torch")
        stats = memory_stats(torch)
        kept = history.finish(stats)
        meta = {"pid": os.getpid(), "rank": os.environ.get("RANK", os.environ.get("LOCAL_RANK")),
                "torch": torch is not None, "recording": kept["recording"], "snapshot": kept["snapshot"],
                "error": kept["error"], "memory": stats}
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
