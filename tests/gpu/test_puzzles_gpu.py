"""The puzzles on a real GPU (run on the device: python3 -m pytest -m gpu tests/gpu).

For every shipped puzzle: `perflab run` profiles live, the starter fails `perflab check`, the
solution passes it.
"""
import json

import pytest

from conftest import shipped_puzzles
from perflab.__main__ import main

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

PUZZLES = shipped_puzzles()


@pytest.mark.parametrize("puzzle", PUZZLES, ids=[p.id for p in PUZZLES])
def test_run_live_then_starter_fails_and_solution_passes(puzzle, tmp_path, capsys):
    if puzzle.requirements.gpus > torch.cuda.device_count():  # checked by test_multigpu_puzzles_gpu.py there
        pytest.skip(f"{puzzle.id} needs {puzzle.requirements.gpus} GPUs; this machine has {torch.cuda.device_count()}")
    assert main(["run", puzzle.id, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["mode"] == "live" and doc["manifest"]["gpu"] and doc["summary"]["steps"] == puzzle.profile.steps

    assert main(["start", puzzle.id]) == 0
    capsys.readouterr()
    assert main(["check", puzzle.id, "--json"]) == 1, "the unchanged starter must fail the check"
    starter = json.loads(capsys.readouterr().out)
    assert starter["correctness"]["ok"], starter["correctness"]

    assert main(["check", puzzle.id, "--fix", str(puzzle.file("solution")), "--json"]) == 0
    solution = json.loads(capsys.readouterr().out)
    speed = solution["speed"]  # a time puzzle's bar is its speed-up; profiler-overhead's, bare/profiled
    assert solution["passed"] and speed["ci_low"] >= speed["bar"]
    assert speed["bar"] == puzzle.check.speedup or puzzle.check.metric != "time", speed
    assert solution["evidence"]["ok"], solution["evidence"]
