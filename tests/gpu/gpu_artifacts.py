"""Keep a GPU check's run where $PERFLAB_GPU_ARTIFACTS points: its command, exit, output and files."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path


def keep(tag: str, proc: subprocess.CompletedProcess, *files: Path, stderr_tail: int | None = None) -> None:
    """`stderr_tail`: keep only the last that many characters of stderr (a compiler's log can run long)."""
    folder = os.environ.get("PERFLAB_GPU_ARTIFACTS")
    if not folder:
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    stderr = proc.stderr if stderr_tail is None else proc.stderr[-stderr_tail:]
    (Path(folder) / f"{tag}.log").write_text(f"$ {' '.join(map(str, proc.args))}\nexit {proc.returncode}\n"
                                             f"--- stdout\n{proc.stdout}\n--- stderr\n{stderr}")
    for f in files:
        if f.exists():
            shutil.copy(f, Path(folder) / f"{tag}.{f.name}")
