"""What the interactive commands import: `perflab --help`, `list`, `show`, `hint`, `progress` (and `answer`, `run
--replay` once the evidence cache holds the recording) run in a fresh
interpreter and must not load the trace readers' and analyses' heavy modules (numpy, torch, msgspec), Rich's
traceback and markdown machinery they never print, or every command's implementation. Measured by the set of
modules loaded, not by time, so the test holds on a loaded machine and fails when one eager import comes back."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[2] / "src")
HEAVY = ("numpy", "torch", "msgspec", "pandas", "duckdb", "orjson", "rich.traceback", "perflab.trace.model",
         "perflab.trace.kineto", "perflab.analysis", "perflab.report.summary")

PROBE = """
import json, sys
from perflab.__main__ import main
code = main(sys.argv[1:])
sys.stdout.flush()
sys.stderr.write("\\nMODULES=" + json.dumps(sorted(sys.modules)) + "\\n")
sys.exit(code)
"""


def loaded(args: list[str], tmp_path: Path, ok: tuple[int, ...] = (0,)) -> set[str]:
    env = {**os.environ, "PYTHONPATH": SRC, "PERFLAB_HOME": str(tmp_path), "COLUMNS": "200",
           "PERFLAB_CACHE": str(tmp_path / "cache")}
    r = subprocess.run([sys.executable, "-c", PROBE, *args], env=env, capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=120)
    assert r.returncode in ok, r.stderr
    line = [x for x in r.stderr.splitlines() if x.startswith("MODULES=")][-1]
    return set(json.loads(line[len("MODULES="):]))


def heavy(modules: set[str], extra: tuple[str, ...] = ()) -> list[str]:
    return sorted(m for m in modules for h in HEAVY + extra if m == h or m.startswith(h + "."))


@pytest.mark.parametrize("args", [["list"], ["list", "--json"], ["show", "host-sync"],
                                  ["hint", "host-sync"], ["hint", "host-sync", "1"], ["progress"]])
def test_interactive_commands_leave_the_heavy_modules_alone(args, tmp_path):
    mods = loaded(args, tmp_path)
    assert "perflab.cli.puzzles" in mods   # the probe ran the real CLI
    assert heavy(mods) == []


def test_no_pydantic_for_plain_parameters(tmp_path):
    # typer coerces through pydantic; str and digit parameters skip it (perflab/cli/fast_params.py)
    for args in (["show", "host-sync"], ["hint", "host-sync", "2"], ["list", "--tag", "host-sync"]):
        assert heavy(loaded(args, tmp_path), ("pydantic",)) == []


def test_answer_and_replay_read_no_trace_the_second_time(tmp_path):
    # The first run fills the evidence cache (PERFLAB_CACHE); the second grades and replays from it.
    for args in (["answer", "host-sync", "-a", "cause=host-sync"], ["run", "host-sync", "--replay", "--json"]):
        loaded(args, tmp_path, ok=(0, 1))
        mods = loaded(args, tmp_path, ok=(0, 1))
        # perflab.analysis.work.saved_ceilings (which files key the cache) and the report's number formatting are light
        readers = [m for m in heavy(mods, ("pydantic",)) if m not in
                   ("perflab.analysis", "perflab.analysis.work", "perflab.analysis.work.saved_ceilings",
                    "perflab.report.summary")]
        assert readers == [], args


def test_help_reads_no_catalog(tmp_path):
    mods = loaded(["--help"], tmp_path)
    # typer's help renderer (typer.rich_utils) loads rich.traceback and rich.markdown itself: the floor of --help
    mods -= {m for m in mods if m.startswith(("rich.traceback", "rich.markdown"))}
    assert heavy(mods, ("perflab.puzzles", "perflab.doctor")) == []


def test_the_probe_sees_a_heavy_import(tmp_path):
    # The same probe on a command that reads a trace must see numpy: the test above can fail.
    from perflab.puzzles.engine import catalog

    trace = catalog.get("host-sync").artifacts
    mods = loaded(["run", "host-sync", "--replay", "--json"], tmp_path)
    assert trace.exists() and "numpy" in mods
