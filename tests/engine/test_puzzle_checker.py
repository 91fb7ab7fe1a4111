"""The fix checker on the CPU (a CPU-capable synthetic puzzle): correctness, poison, speed, evidence."""
import pytest

torch = pytest.importorskip("torch")

from conftest import FAKE_ID, SOLUTION, WORKLOAD  # noqa: E402
from perflab.puzzles.engine import catalog, checker  # noqa: E402
from perflab.puzzles.evidence import trace as trace_evidence  # noqa: E402


@pytest.fixture
def puzzle(fake_catalog):
    return catalog.get(FAKE_ID)


def run_check(puzzle, tmp_path, source, name="fix.py", reps=10):
    fix = tmp_path / name
    fix.write_text(source)
    return checker.check(puzzle, fix, tmp_path, device="cpu", seed=123, reps=reps)


def test_solution_passes(puzzle, tmp_path):
    r = run_check(puzzle, tmp_path, SOLUTION)
    assert r.correctness.ok and r.speed.passed and r.evidence.ok and r.passed, r.to_dict()
    assert r.speed.ci_low >= puzzle.check.speedup and r.slow["median_ms"] > r.fixed["median_ms"]
    assert (tmp_path / "mine.trace.json.gz").is_file()


def test_unchanged_starter_is_correct_but_not_faster(puzzle, tmp_path):
    r = run_check(puzzle, tmp_path, puzzle.file("starter").read_text())
    assert r.correctness.ok and not r.speed.passed and not r.passed


def test_wrong_output_fails_before_timing(puzzle, tmp_path):
    wrong = SOLUTION.replace("alpha=1e-3", "alpha=1.1e-3")
    r = run_check(puzzle, tmp_path, wrong)
    assert not r.correctness.ok and r.speed is None and not r.passed
    assert "checked step 1: out" in r.correctness.message and "rtol=0.0001" in r.correctness.message


def test_poisoned_out_catches_a_fix_that_skips_the_work(puzzle, tmp_path):
    lazy = WORKLOAD.split("def step")[0] + "def step(state):\n    return state['out']\n"
    r = run_check(puzzle, tmp_path, lazy)
    assert not r.correctness.ok and "nan" in r.correctness.message.lower()


def test_a_crashing_fix_fails_in_one_line(puzzle, tmp_path):
    r = run_check(puzzle, tmp_path, WORKLOAD.split("def step")[0] + "def step(state):\n    raise ValueError('oops')\n")
    assert not r.passed and r.correctness.message == "step() raised ValueError: oops"
    r = run_check(puzzle, tmp_path, "def setup(device, seed):\n    return 1/0\ndef step(s):\n    pass\n")
    assert r.correctness.message.startswith("setup() raised ZeroDivisionError")


def test_a_fix_crashing_while_profiled_fails_in_one_line_but_a_doctor_error_is_not_blamed_on_it(puzzle, tmp_path,
                                                                                               monkeypatch):
    def crash(*a, **kw):
        raise RuntimeError("boom")

    monkeypatch.setattr(checker.runner, "profile_steps", crash)
    r = run_check(puzzle, tmp_path, SOLUTION)
    assert not r.passed and r.correctness.message == "crashed while re-profiling: RuntimeError: boom"
    monkeypatch.undo()

    def doctor_bug(puzzle, trace):
        raise KeyError("a doctor bug")

    monkeypatch.setattr(trace_evidence, "planted_evidence", doctor_bug)
    with pytest.raises(KeyError, match="a doctor bug"):
        run_check(puzzle, tmp_path, SOLUTION)


def test_tolerance_by_dtype_and_override(puzzle):
    assert checker.tolerance("bfloat16", puzzle) == checker.DTYPE_TOLERANCES["bfloat16"]
    assert checker.tolerance("int64", puzzle) == (0.0, 0.0)
    from dataclasses import replace

    strict = replace(puzzle, check=replace(puzzle.check, rtol=1e-9, atol=0.0))
    assert checker.tolerance("float32", strict) == (1e-9, 0.0)


def test_compare_outputs(puzzle):
    ref = checker.flatten((torch.ones(4, dtype=torch.bfloat16), {"n": 3}))
    close = checker.flatten((torch.ones(4, dtype=torch.bfloat16) * 1.0078125, {"n": 3}))  # 1 bf16 ulp
    assert checker.compare(ref, close, puzzle) == ""
    far = checker.flatten((torch.ones(4, dtype=torch.bfloat16) * 1.25, {"n": 3}))
    assert "out[0]" in checker.compare(ref, far, puzzle)
    assert "out[1]['n']: expected 3, got 4" == checker.compare(ref, checker.flatten((ref[0][1], {"n": 4})), puzzle)
    assert "structure differs" in checker.compare(ref, checker.flatten([ref[0][1]]), puzzle)
    wrong_dtype = checker.flatten((torch.ones(4), {"n": 3}))
    assert "dtype" in checker.compare(ref, wrong_dtype, puzzle).lower()
