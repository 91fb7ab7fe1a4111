"""Sampled profiles (tools = ["py-spy"]): the variant's loop (evidence/loop_target.py) sampled by py-spy, run
as py-spy's child (`py-spy record --format speedscope -- python -m perflab.puzzles.evidence.loop_target
FILE`); where the container forbids that, again with `--nonblocking`. Written as `<variant>.pyspy.json.gz`
(speedscope JSON, read by trace.speedscope) and `pyspy.json` (the commands and how each went).
"""
from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from perflab.errors import PerflabError
from perflab.puzzles.engine import replay
from perflab.puzzles.engine.kinds import Kind, Recording, register
from perflab.puzzles.engine.spec import display_path

PYSPY_RATE = 250
PYSPY_SECONDS = 4.0


def pyspy_file(folder: Path, variant: str) -> Path:
    return Path(folder) / f"{variant}.pyspy.json.gz"


def pyspy_command(pyspy: str, target: Path, output: Path, device: str, extra: tuple[str, ...] = ()) -> list[str]:
    return [pyspy, "record", "--format", "speedscope", "--rate", str(PYSPY_RATE), *extra, "--output", str(output),
            "--", sys.executable, "-m", "perflab.puzzles.evidence.loop_target", str(target), "--device", device,
            "--seconds", str(PYSPY_SECONDS)]


def record_pyspy(puzzle: Any, workdir: Path, device: str) -> list[Path]:
    from perflab.paths import child_env

    pyspy = shutil.which("py-spy")
    if pyspy is None:
        raise PerflabError(f"{puzzle.id} records a py-spy profile: pip install py-spy (none on PATH)")
    log: dict[str, Any] = {}
    out = []
    for variant in replay.RECORDED_VARIANTS:
        raw = workdir / f"{variant}.speedscope.json"
        tries = []
        for extra in ((), ("--nonblocking",)):
            cmd = pyspy_command(pyspy, puzzle.file(variant), raw, device, extra)
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=child_env())
            tail = [ln for ln in (p.stderr + p.stdout).strip().splitlines() if ln.strip()][-3:]
            shown = ["py-spy", *cmd[1:]]
            shown[shown.index("--output") + 1] = raw.name
            shown[shown.index("--") + 1] = "python"
            shown[shown.index("perflab.puzzles.evidence.loop_target") + 1] = puzzle.file(variant).name
            tries.append({"command": " ".join(shown), "exit": p.returncode,
                          "output": [ln.replace(str(workdir) + "/", "") for ln in tail]})
            if p.returncode == 0 and raw.is_file():
                break
        log[variant] = tries
        if not raw.is_file():
            raise PerflabError(f"py-spy could not sample {puzzle.id} {variant}: {tries[-1]['output']}")
        dest = pyspy_file(workdir, variant)
        with gzip.open(dest, "wb") as fh:
            fh.write(raw.read_bytes())
        out.append(dest)
    meta = workdir / "pyspy.json"
    runner.write_json(meta, log)
    return out + [meta]


@register
class PySpy(Kind):
    name = "py-spy"
    tools = ("py-spy",)

    def record(self, rec: Recording) -> list[Path]:
        return record_pyspy(rec.puzzle, rec.folder("extras"), rec.device)

    def replay(self, ev: Any, variant: str = "slow") -> Any:
        from perflab.trace.speedscope import load

        path = pyspy_file(ev.folder, variant)
        if not path.is_file():
            raise PerflabError(f"no recorded {variant} py-spy profile at {display_path(path)}: {ev._record_hint()}")
        return load(path)
