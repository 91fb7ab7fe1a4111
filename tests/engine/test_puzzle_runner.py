"""Live runs on the CPU (a CPU-capable puzzle): the profiler schedule, the artifacts, recording."""
import gzip
import json
import re

import pytest

torch = pytest.importorskip("torch")

from conftest import FAKE_ID  # noqa: E402
from perflab.errors import NeedsGPU, PerflabError  # noqa: E402
from perflab.puzzles.engine import catalog, recording, replay, runner, workspace  # noqa: E402


@pytest.fixture
def puzzle(fake_catalog):
    return catalog.get(FAKE_ID)


def test_run_variant_writes_artifacts_with_one_profiler_step_per_step(puzzle, tmp_path):
    ticks = []
    res = runner.run_variant(puzzle, puzzle.file("slow"), "slow", tmp_path, device="cpu", command="test",
                             steps=4, on_step=lambda done, total: ticks.append((done, total)))
    assert res.trace == tmp_path / "slow.trace.json.gz"
    with gzip.open(res.trace, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    steps = sorted({e["name"] for e in events if re.fullmatch(r"ProfilerStep#\d+", e.get("name", ""))})
    assert len(steps) == 4, steps
    assert any(e.get("name") == "aten::add" for e in events)
    assert ticks[-1] == (puzzle.profile.warmup + 1 + 4,) * 2
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["device"] == "cpu" and manifest["torch"] == torch.__version__ and manifest["command"] == "test"
    for key in ("gpu", "cc", "driver", "cuda", "python", "perflab", "date", "host"):
        assert key in manifest
    m = json.loads((tmp_path / "measurements.json").read_text())["slow"]
    assert m["n"] == 4 and m["median_ms"] > 0


def test_live_device_and_requirements(puzzle, monkeypatch):
    from dataclasses import replace

    monkeypatch.setattr(runner, "cuda_available", lambda: False)
    assert runner.live_device(puzzle) == "cpu"
    gpu_only = replace(puzzle, requirements=replace(puzzle.requirements, gpu=True))
    assert runner.live_device(gpu_only) is None
    with pytest.raises(NeedsGPU, match=r"needs a CUDA GPU \(torch sees no CUDA GPU\).*--replay"):
        runner.require_device(gpu_only, "perflab check")
    needs_pkg = replace(puzzle, requirements=replace(puzzle.requirements, packages=("no_such_pkg_xyz",)))
    with pytest.raises(PerflabError, match="needs the package"):
        runner.check_requirements(needs_pkg, "cpu")


def test_load_module_reports_broken_files_in_one_line(tmp_path):
    bad = tmp_path / "fix.py"
    bad.write_text("import nonexistent_module_xyz\n")
    with pytest.raises(PerflabError, match="fix.py failed to import: ModuleNotFoundError"):
        runner.load_module(bad)
    bad.write_text("def setup(device, seed):\n    return {}\n")
    with pytest.raises(PerflabError, match=r"has no step\(\) function"):
        runner.load_module(bad)


def test_a_crash_while_running_is_one_line(puzzle, tmp_path):
    bad = tmp_path / "fix.py"
    bad.write_text("def setup(device, seed):\n    return {}\ndef step(state):\n    raise KeyError('x')\n")
    with pytest.raises(PerflabError, match=r"fix.py failed while running: KeyError: 'x'"):
        runner.run_variant(puzzle, bad, "mine", tmp_path, device="cpu", command="test")


def test_workspace_start_never_overwrites(puzzle):
    path, created = workspace.start(puzzle)
    assert created and path.read_text() == puzzle.file("starter").read_text()
    path.write_text("# mine\n")
    assert workspace.start(puzzle) == (path, False) and path.read_text() == "# mine\n"
    assert workspace.variant_source(puzzle, "mine") == path
    a, b, c = (workspace.new_run_dir(puzzle, v, now=0) for v in ("slow", "check", "slow"))
    assert len({a, b, c}) == 3 and a.parent == b.parent == workspace.puzzle_dir(puzzle) / "runs"
    assert sorted([c, b, a]) == [a, b, c]  # names sort in creation order


def test_record_then_replay_the_recording(puzzle, tmp_path):
    dest = tmp_path / "rec" / "artifacts"
    v, written = recording.record(puzzle, dest, "cpu", tmp_path / "work", "record test", seed=7)
    assert v.ok and written, v.problems()
    assert {p.name for p in dest.iterdir()} == {"manifest.json", "measurements.json", "slow.trace.json.gz",
                                                 "solution.trace.json.gz"}
    m = json.loads((dest / "measurements.json").read_text())
    assert m["speedup"]["ci_low"] >= puzzle.check.speedup and len(m["slow"]["samples_ms"]) == puzzle.check.reps
    assert m["check"]["solution"]["passed"] and not m["check"]["starter"]["passed"]
    ev = replay.Evidence(dest, puzzle.id)
    assert ev.summary("slow")["steps"] == puzzle.profile.steps
    assert replay.replay_label(ev.manifest()).startswith("REPLAY of a recording made on the CPU on ")
