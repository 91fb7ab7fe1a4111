"""The first three catalog puzzles: their puzzle.toml, and their workloads run on the CPU.

Each puzzle's workload.py (slow), solution.py and starter.py are loaded by path (the way the
runner and the checker load them) and run with setup("cpu", seed) + step. On device "cpu" the
workloads use their SMOKE_SIZE, so every run here takes milliseconds. The GPU paths (CUDA graphs,
pinned memory, streams) run on the device machine (tests/gpu, scripts/record.py puzzle).
"""
from __future__ import annotations

import contextlib
import importlib.util
import itertools
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

CATALOG = Path(__file__).resolve().parents[2] / "src" / "perflab" / "catalog"
PUZZLES = {
    "launch-overhead": "01-launch-overhead",
    "host-sync": "02-host-sync",
    "pageable-copies": "03-pageable-copies",
}
VARIANTS = ("workload", "solution", "starter")
ANALYSES = {"doctor_top_id", "gpu_busy_pct", "step_time_ms", "kernels_per_step", "syncs_per_step",
            "top_kernel", "copy_bytes_per_step", "pageable_copies_per_step", "speedup", "summary_field"}
_ids = itertools.count()


def load(pid: str, variant: str):
    path = shipped_file(CATALOG / PUZZLES[pid], variant)
    spec = importlib.util.spec_from_file_location(f"catalog_test_{next(_ids)}_{variant}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def toml(pid: str) -> dict:
    return tomllib.loads((CATALOG / PUZZLES[pid] / "puzzle.toml").read_text(encoding="utf-8"))


def run(module, seed: int, **overrides):
    state = module.setup("cpu", seed)
    state.update(overrides)
    return module.step(state)


def assert_same(got, expected):
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if expected.is_floating_point():
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    else:
        assert torch.equal(got, expected)


# ---------------------------------------------------------------------------------------- puzzle.toml

@pytest.mark.parametrize("pid", PUZZLES)
def test_puzzle_toml_has_the_contract_fields(pid):
    from perflab.doctor.finding import TAXONOMY_IDS

    d = toml(pid)
    assert d["id"] == pid == PUZZLES[pid].split("-", 1)[1]
    assert d["order"] == 10 * int(PUZZLES[pid][:2]) and d["level"] == 1
    for key in ("title", "story", "question", "look_at"):
        assert isinstance(d[key], str) and d[key].strip(), key
    assert isinstance(d["prerequisites"], list) and d["seeds"] and all(isinstance(s, str) for s in d["seeds"])
    assert d["taxonomy"] and all(t in TAXONOMY_IDS for t in d["taxonomy"])
    assert d["tools"] == ["torch-profiler"]
    assert d["requirements"] == {"gpu": True, "min_cc": "8.0", "gpus": 1, "packages": []}
    assert d["profile"]["warmup"] >= 1 and 1 <= d["profile"]["steps"] <= 20
    assert d["check"]["speedup"] == 2.0 and d["check"]["planted"] == d["taxonomy"][0]
    assert 3 <= len(d["hints"]) <= 4 and all(isinstance(h, str) and h for h in d["hints"])

    questions = d["questions"]
    assert 3 <= len(questions) <= 5
    assert len({q["key"] for q in questions}) == len(questions)
    for q in questions:
        assert re.match(r"^[a-z0-9_-]+$", q["key"]) and q["prompt"].strip()
        assert q["analysis"] in ANALYSES and isinstance(q.get("args", {}), dict)
        assert q["type"] in ("taxonomy", "number", "text", "choice")
        if q["type"] == "number":
            assert 0.15 <= q["tolerance"] <= 0.25
        variant = q.get("args", {}).get("variant", "slow")
        assert variant in ("slow", "solution")
    cause = [q for q in questions if q["analysis"] == "doctor_top_id"]
    assert cause and cause[0]["type"] == "taxonomy" and cause[0]["args"] == {"variant": "slow"}


@pytest.mark.parametrize("pid", PUZZLES)
def test_puzzle_folder_has_readme_and_variants(pid):
    folder = CATALOG / PUZZLES[pid]
    readme = (folder / "README.md").read_text(encoding="utf-8")
    assert f"`{pid}`" in readme and f"perflab check {pid}" in readme
    for variant in VARIANTS:
        assert shipped_file(folder, variant).is_file()
    assert f"perflab check {pid}" in shipped_file(folder, "starter").read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------------- workloads

@pytest.mark.parametrize("pid", PUZZLES)
def test_variants_share_sizes(pid, monkeypatch):
    w, s, st = (load(pid, v) for v in VARIANTS)
    assert w.SIZE == s.SIZE == st.SIZE
    assert w.SMOKE_SIZE == s.SMOKE_SIZE == st.SMOKE_SIZE
    assert_sized_for_the_device(w, monkeypatch)


def test_a_workload_runs_at_its_smoke_size_on_the_cpu_or_with_perflab_smoke(monkeypatch):
    from perflab.workloads import sizes

    full, smoke = {"n": 4096}, {"n": 8}
    monkeypatch.delenv("PERFLAB_SMOKE", raising=False)
    assert sizes.pick("cpu", full, smoke) == smoke and sizes.pick("cuda:0", full, smoke) == full
    assert sizes.pick("cuda", full, smoke) is not full   # a copy: a caller's change never reaches SIZE
    monkeypatch.setenv("PERFLAB_SMOKE", "1")
    assert sizes.pick("cuda", full, smoke) == smoke


@pytest.mark.parametrize("pid", PUZZLES)
@pytest.mark.parametrize("seed", [0, 1234])
def test_solution_matches_slow_on_cpu(pid, seed):
    expected = run(load(pid, "workload"), seed)
    assert_same(run(load(pid, "solution"), seed), expected)


@pytest.mark.parametrize("pid", PUZZLES)
def test_starter_is_the_slow_workload(pid):
    folder = CATALOG / PUZZLES[pid]

    def code(variant):  # everything after the module docstring
        return re.sub(r'^""".*?"""\n', "", shipped_file(folder, variant).read_text(encoding="utf-8"), flags=re.DOTALL)

    assert code("starter") == code("workload")
    assert_same(run(load(pid, "starter"), 5), run(load(pid, "workload"), 5))


@pytest.mark.parametrize("pid", PUZZLES)
def test_workloads_are_deterministic_and_seeded(pid):
    w = load(pid, "workload")
    a, b, c = run(w, 3), run(w, 3), run(w, 4)
    assert_same(a, b)
    assert not torch.equal(a, c)
    state = w.setup("cpu", 3)
    assert_same(w.step(state), w.step(state))       # repeated steps on one state give the same output


def test_launch_overhead_output():
    w = load("launch-overhead", "workload")
    out = run(w, 0)
    assert out.dtype == torch.float32 and out.shape == (w.SMOKE_SIZE["tokens"], w.SMOKE_SIZE["dim"])
    assert torch.isfinite(out).all()


def test_host_sync_tokens_and_early_eos():
    w, s = load("host-sync", "workload"), load("host-sync", "solution")
    n = w.SMOKE_SIZE["new_tokens"]
    tokens = run(w, 11)
    assert tokens.dtype == torch.long and tokens.shape == (n,)
    assert ((tokens >= 0) & (tokens < w.SMOKE_SIZE["vocab"])).all()       # seed 11: no EOS, no PAD
    # make the id generated at position 5 the EOS: the slow loop stops there, the solution masks
    eos = int(tokens[5])
    first = int((tokens == eos).nonzero()[0])
    slow = run(w, 11, eos=eos)
    assert slow[: first + 1].tolist() == tokens[: first + 1].tolist()
    assert (slow[first + 1:] == w.PAD).all()
    assert_same(run(s, 11, eos=eos), slow)


def test_pageable_copies_output_and_sizes():
    w = load("pageable-copies", "workload")
    k, n, d = (w.SMOKE_SIZE[key] for key in ("batches", "rows", "dim"))
    out = run(w, 0)
    assert out.dtype == torch.bfloat16 and out.shape == (k, n, d)
    full = w.SIZE
    per_batch = 2 * full["rows"] * full["dim"] * 2 + full["rows"] * 2                 # x, r, s in bf16
    assert 64 << 20 <= full["batches"] * per_batch <= 256 << 20                       # 64..256 MiB per step


def test_pageable_pipeline_logic_with_fake_streams(monkeypatch):
    """The solution's GPU step (two slots, copy stream, events) run on the CPU with stand-in streams."""
    s, w = load("pageable-copies", "solution"), load("pageable-copies", "workload")
    expected = run(w, 9)

    class FakeEvent:
        def __init__(self, *args, **kwargs):
            self.recorded = False

        def record(self, stream=None):
            self.recorded = True

    class FakeStream:
        def wait_stream(self, other):
            pass

        def wait_event(self, event):
            assert event.recorded, "waiting on an event that was never recorded orders nothing"

    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a, **k: FakeStream())
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    state = s.setup("cpu", 9)
    k = len(state["host_batches"])
    state["slots"] = [tuple(torch.empty_like(t) for t in state["host_batches"][0]) for _ in range(2)]
    state["out"] = torch.full((k, *state["host_batches"][0][0].shape), float("nan"), dtype=torch.bfloat16)
    state["copy_stream"] = FakeStream()
    got = s.step(state)
    assert got is state["out"]
    assert_same(got, expected)
