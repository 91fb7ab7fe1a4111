"""The GPU timeline puzzles (catalog 10-14): puzzle.toml, workloads on the CPU, the batch-size sweep.

Each puzzle's workload.py (slow), solution.py and starter.py are loaded by path, the way the runner
and the checker load them, and run with setup("cpu", seed) + step at their SMOKE_SIZE. The GPU
paths (pinned buffers, side streams, torch.compile) run on the device machine
(scripts/record.py puzzle); the stream pipeline of copy-compute-overlap also runs here with
stand-in streams and events that check the ordering.
"""
from __future__ import annotations

import contextlib
import importlib.util
import itertools
import json
import re
import sys
from pathlib import Path

import pytest
from conftest import assert_sized_for_the_device, shipped_file

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

torch = pytest.importorskip("torch")

from perflab.errors import PerflabError  # noqa: E402
from perflab.puzzles.engine import catalog, replay  # noqa: E402
from perflab.puzzles import questions
from perflab.toolkit import batch_sweep  # noqa: E402

CATALOG = Path(__file__).resolve().parents[2] / "src" / "perflab" / "catalog"
PUZZLES = {
    "d2h-copy": "10-d2h-copy",
    "unfused-elementwise": "11-unfused-elementwise",
    "copy-compute-overlap": "12-copy-compute-overlap",
    "batch-size-knee": "13-batch-size-knee",
    "operator-hotspot": "14-operator-hotspot",
}
VARIANTS = ("workload", "solution", "starter")
_ids = itertools.count()


def load(pid: str, variant: str):
    path = shipped_file(CATALOG / PUZZLES[pid], variant)
    spec = importlib.util.spec_from_file_location(f"timeline_test_{next(_ids)}_{variant}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def toml(pid: str) -> dict:
    return tomllib.loads((CATALOG / PUZZLES[pid] / "puzzle.toml").read_text(encoding="utf-8"))


def run(module, seed: int):
    out = module.step(module.setup("cpu", seed))
    return out.clone() if isinstance(out, torch.Tensor) else out


def assert_same(got, expected, rtol=1e-5, atol=1e-5):
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if expected.is_floating_point():
        torch.testing.assert_close(got, expected, rtol=rtol, atol=atol)
    else:
        assert torch.equal(got, expected)


# ---------------------------------------------------------------------------------------- puzzle.toml

@pytest.mark.parametrize("pid", PUZZLES)
def test_puzzle_toml_has_the_contract_fields(pid):
    from perflab.doctor.finding import TAXONOMY_IDS

    d = toml(pid)
    folder = PUZZLES[pid]
    assert d["id"] == pid == folder.split("-", 1)[1]
    assert d["order"] == 10 * int(folder[:2]) and d["level"] in (1, 2)
    for key in ("title", "story", "question", "look_at"):
        assert isinstance(d[key], str) and d[key].strip(), key
    assert d["prerequisites"] and d["seeds"] and all(isinstance(s, str) for s in d["seeds"])
    assert d["taxonomy"] and all(t in TAXONOMY_IDS for t in d["taxonomy"])
    assert d["requirements"] == {"gpu": True, "min_cc": "8.0", "gpus": 1, "packages": []}
    assert d["profile"]["warmup"] >= 1 and 1 <= d["profile"]["steps"] <= 10
    assert d["check"]["speedup"] >= 1.5 and d["check"]["planted"] == d["taxonomy"][0]
    assert 3 <= len(d["hints"]) <= 4 and all(isinstance(h, str) and h for h in d["hints"])
    qs = d["questions"]
    assert 3 <= len(qs) <= 5 and len({q["key"] for q in qs}) == len(qs)
    for q in qs:
        assert q["analysis"] in questions.ANALYSES
        if q["type"] == "number":
            assert 0.15 <= q["tolerance"] <= 0.25
    cause = [q for q in qs if q["analysis"] == "doctor_top_id"]
    assert cause and cause[0]["type"] == "taxonomy" and cause[0]["args"] == {"variant": "slow"}


def test_puzzles_load_in_curriculum_order_with_known_prerequisites():
    puzzles = catalog.load_catalog([catalog.BUILTIN])
    ids = [p.id for p in puzzles]
    mine = [pid for pid in ids if pid in PUZZLES]
    assert mine == list(PUZZLES)                                   # orders 100..140, in folder order
    for p in puzzles:
        if p.id in PUZZLES:
            assert all(ids.index(pre) < ids.index(p.id) for pre in p.prerequisites)


@pytest.mark.parametrize("pid", PUZZLES)
def test_puzzle_folder_has_readme_and_variants(pid):
    folder = CATALOG / PUZZLES[pid]
    readme = (folder / "README.md").read_text(encoding="utf-8")
    assert f"`{pid}`" in readme and f"perflab check {pid}" in readme
    assert f"perflab check {pid}" in shipped_file(folder, "starter").read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------------- workloads

@pytest.mark.parametrize("pid", PUZZLES)
def test_variants_share_sizes(pid, monkeypatch):
    w, s, st = (load(pid, v) for v in VARIANTS)
    assert w.SIZE == s.SIZE == st.SIZE and w.SMOKE_SIZE == s.SMOKE_SIZE == st.SMOKE_SIZE
    assert_sized_for_the_device(w, monkeypatch)


TOLERANCE = {"operator-hotspot": (2e-2, 5e-2), "batch-size-knee": (1e-3, 1e-4)}


@pytest.mark.parametrize("pid", PUZZLES)
@pytest.mark.parametrize("seed", [0, 1234])
def test_solution_matches_slow_on_cpu(pid, seed):
    expected = run(load(pid, "workload"), seed)
    assert_same(run(load(pid, "solution"), seed), expected, *TOLERANCE.get(pid, (1e-5, 1e-5)))


@pytest.mark.parametrize("pid", PUZZLES)
def test_starter_is_the_slow_workload(pid):
    folder = CATALOG / PUZZLES[pid]

    def code(variant):  # everything after the module docstring
        return re.sub(r'^""".*?"""\n', "", shipped_file(folder, variant).read_text(encoding="utf-8"), flags=re.DOTALL)

    assert code("starter") == code("workload")


@pytest.mark.parametrize("pid", PUZZLES)
def test_workloads_are_deterministic_and_seeded(pid):
    w = load(pid, "workload")
    a, b, c = run(w, 3), run(w, 3), run(w, 4)
    assert_same(a, b)
    assert not torch.equal(a, c)
    state = w.setup("cpu", 3)
    assert_same(w.step(state).clone(), w.step(state).clone())     # repeated steps on one state agree


def test_d2h_copy_tokens_are_allowed_ids():
    w = load("d2h-copy", "workload")
    state = w.setup("cpu", 5)
    tokens = w.step(state)
    size = w.SMOKE_SIZE
    assert tokens.dtype == torch.long and tokens.shape == (size["batch"], size["tokens"])
    assert torch.isin(tokens, state["allowed"]).all()
    assert len(state["allowed"]) == size["allowed"] and len(torch.unique(tokens)) > 1
    # the bytes the slow loop moves per token: the full fp32 logits
    full = w.SIZE
    assert full["batch"] * full["vocab"] * 4 >= 8 << 20


def test_unfused_epilogue_is_the_tanh_gelu():
    import torch.nn.functional as F

    w = load("unfused-elementwise", "workload")
    s = w.setup("cpu", 2)
    ref = F.gelu(s["x"] + s["bias"], approximate="tanh") * s["gamma"] + s["residual"]
    torch.testing.assert_close(w.step(s), ref, rtol=1e-5, atol=1e-5)


def test_overlap_pipeline_logic_with_fake_streams(monkeypatch):
    """The solution's three-stream pipeline run on the CPU with stand-in streams and events:
    every wait is on an event that was recorded, and no slot is reused before it is free."""
    s, w = load("copy-compute-overlap", "solution"), load("copy-compute-overlap", "workload")
    expected = run(w, 9)
    log = []

    class FakeEvent:
        def __init__(self, *args, **kwargs):
            self.recorded = False

        def record(self, stream=None):
            self.recorded = True

    class FakeStream:
        def __init__(self, name):
            self.name = name

        def wait_stream(self, other):
            pass

        def wait_event(self, event):
            assert event.recorded, f"{self.name} waits on an event that was never recorded: orders nothing"
            log.append(self.name)

        def synchronize(self):
            pass

    compute = FakeStream("compute")
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a, **k: compute)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    state = s.setup("cpu", 9)
    k, n, d = state["host_x"].shape
    state["slots_in"] = [torch.empty(n, d, dtype=torch.bfloat16) for _ in range(2)]
    state["slots_out"] = [torch.empty(n, d, dtype=torch.bfloat16) for _ in range(2)]
    state["copy_in"], state["copy_out"] = FakeStream("copy_in"), FakeStream("copy_out")
    state["out"].fill_(float("nan"))
    got = s.step(state)
    assert got is state["out"]
    assert_same(got, expected)
    assert log.count("compute") == k + (k - 2) and log.count("copy_out") == k and log.count("copy_in") == k - 2


def test_batch_knee_solution_batches_the_requests():
    s = load("batch-size-knee", "solution")
    calls = []
    state = s.setup("cpu", 1)
    forward = s.forward
    s.forward = lambda st, x: calls.append(x.shape[0]) or forward(st, x)
    s.step(state)
    n = s.SMOKE_SIZE["requests"]
    assert sum(calls) == n and max(calls) == s.SMOKE_BATCH and len(calls) == -(-n // s.SMOKE_BATCH)
    assert s.BATCH > 1 and s.SIZE["requests"] % s.BATCH == 0


# ---------------------------------------------------------------------------------------- the sweep

def points(throughputs):
    return [{"batch": 2 ** i, "latency_ms": 0.01 * 2 ** i / t * 1e5, "forward_ms": 1e3 * 2 ** i / t,
             "throughput": float(t)} for i, t in enumerate(throughputs)]


def test_knee_is_the_first_batch_near_the_best_throughput():
    pts = points([10, 20, 40, 70, 85, 90, 88])
    assert batch_sweep.knee(pts)["batch"] == 16             # 85 >= 0.8 * 90, 70 is not
    assert batch_sweep.knee(pts, 0.5)["batch"] == 8              # 70 >= 45, 40 is not
    assert batch_sweep.knee(list(reversed(pts)))["batch"] == 16
    assert batch_sweep.knee(pts, 1.0)["batch"] == 32
    with pytest.raises(PerflabError):
        batch_sweep.knee([])
    with pytest.raises(PerflabError):
        batch_sweep.knee(pts, 1.5)
    assert batch_sweep.point(pts, 8)["throughput"] == 70
    with pytest.raises(PerflabError, match="no batch 3"):
        batch_sweep.point(pts, 3)


def test_sweep_times_a_real_model_on_the_cpu():
    w = load("batch-size-knee", "workload")
    state = w.setup("cpu", 0)
    with torch.no_grad():
        pts = batch_sweep.sweep(lambda x: w.forward(state, x), lambda b: w.make_batch(state, b, seed=b),
                                [1, 4, 16], device="cpu", reps=3, pipeline=2, warmup=1)
    assert [p["batch"] for p in pts] == [1, 4, 16]
    for p in pts:
        assert p["latency_ms"] > 0 and p["forward_ms"] > 0
        assert p["throughput"] == pytest.approx(p["batch"] / (p["forward_ms"] / 1e3))
    with pytest.raises(PerflabError):
        batch_sweep.sweep(lambda x: x, lambda b: b, [0], device="cpu")


def test_sweep_plot_and_questions_from_a_recording(tmp_path):
    pytest.importorskip("matplotlib")
    pts = points([100, 200, 400, 700, 850, 900])
    result = {"schema": batch_sweep.SCHEMA, "knee_fraction": 0.8, "points": pts}
    (tmp_path / "sweep.json").write_text(json.dumps(result))
    png = batch_sweep.plot(result, tmp_path / "sweep.png", title="test")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    puzzle = catalog.get("batch-size-knee")
    ev = replay.Evidence(tmp_path, puzzle.id)
    answers = {q.key: questions.compute(q, ev) for q in puzzle.questions if q.analysis.startswith("sweep")}
    assert answers["knee"].value == 16 and answers["knee_throughput"].value == 850
    assert answers["latency_1"].value == pytest.approx(pts[0]["latency_ms"])
    q = puzzle.find_question("knee")
    assert questions.grade(q, "16", answers["knee"]).correct
    assert not questions.grade(q, "32", answers["knee"]).correct


def test_sweep_questions_without_a_sweep_say_how_to_record_it(tmp_path):
    puzzle = catalog.get("batch-size-knee")
    # the error names what is missing and what a user can run (the repository's recording scripts are not theirs)
    with pytest.raises(PerflabError, match=r"no batch-size sweep .*`perflab run batch-size-knee`"):
        questions.compute(puzzle.find_question("knee"), replay.Evidence(tmp_path, puzzle.id))
