"""`stages`: intermediate fixes recorded like slow and solution, answered like them in replay.

The replay side runs on a real H100 recording (53-warp-divergence's artifacts, its slow variant copied as
`stage1`), so the ncu and trace analyses see a stage name exactly where they see a variant; the recording
side runs on the CPU with the synthetic puzzle of conftest.py.
"""
from __future__ import annotations

import json
import shutil

import pytest

from conftest import FAKE_ID, make_puzzle
from perflab.__main__ import main
from perflab.errors import PerflabError
from perflab.puzzles import questions
from perflab.puzzles.engine import catalog, recording, replay, spec, workspace
from perflab.puzzles.questions import ncu as questions_ncu
from perflab.puzzles.questions import trace as trace_questions

RECORDED = catalog.BUILTIN / "53-warp-divergence" / "artifacts"
KERNEL_TOML = '''
id = "zz-staged-kernel"
title = "Synthetic: a recorded kernel puzzle with one stage"
level = 3
order = 991
seeds = ["tests"]
taxonomy = ["warp-divergence"]
tools = ["torch-profiler", "ncu"]
stages = ["stage1"]
story = """53-warp-divergence's recording, its slow variant copied as stage1."""
question = "Does a stage answer like a variant?"
look_at = "artifacts/stage1.ncu-rep.gz"
hints = ["one", "two", "three"]

[ncu]
kernel = "^channel_mix"

[[questions]]
key = "stage1_cause"
prompt = "ncu top id of stage1?"
type = "taxonomy"
analysis = "ncu_top_id"
args = { variant = "stage1" }

[[questions]]
key = "stage1_threads"
prompt = "threads per instruction in stage1?"
type = "number"
analysis = "ncu_metric"
args = { variant = "stage1", metric = "smsp__thread_inst_executed_per_inst_executed.ratio" }

[[questions]]
key = "stage1_trace_cause"
prompt = "the doctor's top id on stage1's trace?"
type = "taxonomy"
analysis = "doctor_top_id"
args = { variant = "stage1" }

[[questions]]
key = "step1"
prompt = "stage1 over slow?"
type = "number"
analysis = "variant_speedup"
args = { variant = "stage1", over = "slow" }

[[questions]]
key = "step2"
prompt = "solution over stage1?"
type = "number"
analysis = "variant_speedup"
args = { variant = "solution", over = "stage1" }
'''


@pytest.fixture
def staged(tmp_path, monkeypatch):
    """A kernel puzzle whose artifacts are a real recording plus `stage1` (= its slow variant)."""
    if not (RECORDED / "slow.csv.gz").is_file():
        pytest.skip("53-warp-divergence is not recorded")
    folder = tmp_path / "catalog" / "99-zz-staged-kernel"
    shutil.copytree(RECORDED, folder / "artifacts")
    art = folder / "artifacts"
    for name in ("trace.json.gz", "csv.gz", "ncu-rep.gz"):
        shutil.copyfile(art / f"slow.{name}", art / f"stage1.{name}")
    m = json.loads((art / "measurements.json").read_text())
    m["stages"] = {"stage1": {"median_ms": 2 * m["slow"]["median_ms"], "slow_median_ms": m["slow"]["median_ms"],
                              "speedup_vs_slow": 0.5, "correct": True}}
    (art / "measurements.json").write_text(json.dumps(m))
    (folder / "puzzle.toml").write_text(KERNEL_TOML)
    for f in ("workload", "starter", "solution", "stage1"):
        (folder / f"{f}.py").write_text("# replay only: never run\n")
    monkeypatch.setenv("PERFLAB_CATALOG", str(tmp_path / "catalog"))
    return catalog.get("zz-staged-kernel"), m


def test_a_stage_is_answered_from_its_own_artifacts(staged):
    puzzle, m = staged
    ev = replay.recording(puzzle)
    assert replay.recorded_variants(puzzle) == ("slow", "solution", "stage1")
    got = {q.key: questions.compute(q, ev) for q in puzzle.questions}
    assert got["stage1_cause"].value == questions_ncu.ncu_top_id(ev, "slow").value == "warp-divergence"
    assert "stage1.ncu-rep.gz" in got["stage1_cause"].source
    assert got["stage1_threads"].value == pytest.approx(4.08, abs=0.05)
    assert got["stage1_trace_cause"].value == trace_questions.doctor_top_id(ev, "slow").value
    assert got["step1"].value == pytest.approx(0.5)
    assert got["step2"].value == pytest.approx(2 * m["slow"]["median_ms"] / m["solution"]["median_ms"])
    for q in puzzle.questions:
        assert questions.grade(q, str(got[q.key].value), got[q.key]).correct, q.key


def test_a_stage_without_timings_or_artifacts_says_so(staged, tmp_path):
    puzzle, _ = staged
    (puzzle.artifacts / "stage1.csv.gz").unlink()
    ev = replay.recording(puzzle)
    with pytest.raises(PerflabError, match=r"no recorded stage1 Nsight Compute report .*stage1\.csv\.gz"):
        questions.compute(puzzle.find_question("stage1_cause"), ev)
    with pytest.raises(PerflabError, match="measurements.json has no timings of 'stage2'"):
        trace_questions.variant_speedup(ev, "stage2")


def test_cli_shows_and_replays_a_stage(staged, capsys):
    puzzle, _ = staged
    assert main(["show", puzzle.id]) == 0
    assert "Steps of the fix loop: slow -> stage1 -> solution" in " ".join(capsys.readouterr().out.split())
    assert main(["run", puzzle.id, "--variant", "stage1", "--replay"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "stage1.ncu-rep.gz" in out and "stage1 median" in out and "— stage1" in out
    assert main(["run", puzzle.id, "--variant", "stage2", "--replay"]) == 2
    assert "use slow, solution, stage1 or mine" in capsys.readouterr().err
    assert workspace.variant_source(puzzle, "stage1") == puzzle.folder / "stage1.py"


# --- recording (CPU) -------------------------------------------------------------------------------------

def cpu_staged_puzzle(root, stage_src: str | None = None):
    """The synthetic CPU puzzle of conftest.py with `stages = ["stage1"]` (by default a copy of its solution)."""
    folder = make_puzzle(root, artifacts=False)
    stage_src = stage_src or (folder / "solution.py").read_text()
    toml = (folder / "puzzle.toml").read_text()
    (folder / "puzzle.toml").write_text(toml.replace('tools = ["torch-profiler"]',
                                                     'tools = ["torch-profiler"]\nstages = ["stage1"]', 1))
    (folder / "stage1.py").write_text(stage_src)
    return spec.load(folder / "puzzle.toml")


def test_record_profiles_and_times_each_stage(tmp_path):
    pytest.importorskip("torch")
    puzzle = cpu_staged_puzzle(tmp_path / "cat")
    dest = tmp_path / "rec" / "artifacts"
    v, written = recording.record(puzzle, dest, "cpu", tmp_path / "work", "record test", seed=7)
    assert v.ok and written, v.problems()
    assert {"slow.trace.json.gz", "solution.trace.json.gz", "stage1.trace.json.gz"} <= {p.name for p in dest.iterdir()}
    m = json.loads((dest / "measurements.json").read_text())
    stage = m["stages"]["stage1"]
    assert stage["correct"] and len(stage["samples_ms"]) == puzzle.check.reps
    assert stage["speedup_vs_slow"] == pytest.approx(stage["slow_median_ms"] / stage["median_ms"])
    assert stage["ci_low"] > 1  # the stage is the solution: much faster than slow
    assert "stage1" in m["profiled"]
    ev = replay.Evidence(dest, puzzle.id)
    assert ev.summary("stage1")["steps"] == puzzle.profile.steps
    assert trace_questions.variant_speedup(ev, "stage1").value == pytest.approx(stage["speedup_vs_slow"])


def test_an_incorrect_stage_is_a_problem_of_the_recording(tmp_path):
    pytest.importorskip("torch")
    from types import SimpleNamespace

    from conftest import SOLUTION

    assert "alpha=1e-3" in SOLUTION
    puzzle = cpu_staged_puzzle(tmp_path / "cat", SOLUTION.replace("alpha=1e-3", "alpha=2e-3"))
    stages = recording.measure_stages(puzzle, "cpu", seed=3)
    assert not stages["stage1"]["correct"] and stages["stage1"]["seed"] == 3
    v = recording.Verification(SimpleNamespace(passed=True), SimpleNamespace(passed=False), stages)
    assert not v.ok and v.problems() == [f"stage1 is incorrect ({stages['stage1']['why']})"]
    assert stages["stage1"]["why"].startswith("checked step 1: out:")
    v.stages["stage1"]["correct"] = True
    assert v.ok and v.problems() == []


def test_fake_id_has_no_stages(fake_catalog):
    assert catalog.get(FAKE_ID).stages == () and replay.recorded_variants(catalog.get(FAKE_ID)) == ("slow", "solution")


# --- the puzzle that uses them: optimization-loop -------------------------------------------------------

def test_optimization_loop_asks_about_every_step_of_its_loop():
    p = catalog.get("optimization-loop")
    assert p.stages == ("stage1", "stage2") and p.check.planted == p.taxonomy[0] == "atomic-contention"
    assert [q.args["variant"] for q in p.questions if q.analysis == "ncu_top_id"] == ["slow", "stage1", "stage2"]
    steps = [(q.args["over"], q.args["variant"]) for q in p.questions if q.analysis == "variant_speedup"]
    assert steps == [("slow", "stage1"), ("stage1", "stage2"), ("stage2", "solution")]
    assert all(p.file(v).is_file() for v in replay.recorded_variants(p))


def test_optimization_loop_inputs_sum_exactly_in_any_order(monkeypatch):
    torch = pytest.importorskip("torch")
    from perflab.workloads import sum_reduction

    monkeypatch.setattr(sum_reduction, "N", 1 << 20)
    x = sum_reduction.make_input("cpu", 5)
    assert x.dtype == torch.float32 and x.shape == (1 << 20,) and torch.equal(x, x.round())
    assert int(x.min()) == -7 and int(x.max()) == 7 and not torch.equal(x, sum_reduction.make_input("cpu", 6))
    exact = float(sum_reduction.reference(x))
    in_order = float(torch.cumsum(x, 0)[-1])                   # one fp32 accumulator, like the atomics
    backwards = float(torch.cumsum(x.flip(0), 0)[-1])
    tiles = float(x.view(-1, 256).sum(1).sum())                 # per-block partial sums, then their sum
    assert in_order == backwards == tiles == exact

