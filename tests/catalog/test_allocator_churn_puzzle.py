"""allocator-churn (catalog/28-allocator-churn): the variants on the CPU, where the slow one empties the cache, and
its questions answered from a recording shaped like the H100's (synthetic until the real one is recorded)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import shipped_file
from test_allocator_drain import layers_with_empty_cache

from perflab.puzzles import questions
from perflab.puzzles.engine import catalog, replay, spec
from perflab.puzzles.engine.runner import load_module

torch = pytest.importorskip("torch")

FOLDER = Path(__file__).resolve().parents[2] / "src" / "perflab" / "catalog" / "28-allocator-churn"
VARIANTS = ("workload", "starter", "solution")


def module(variant: str):
    return load_module(shipped_file(FOLDER, variant))


@pytest.fixture
def count_empty_cache(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append(1))
    return calls


def test_the_variants_give_the_same_scores_on_the_cpu():
    outs = []
    for variant in VARIANTS:
        m = module(variant)
        state = m.setup("cpu", 5)
        outs.append(m.step(state))
        assert torch.equal(m.step(state), outs[-1])  # a step is repeatable
    size = module("workload").SMOKE_SIZE
    assert outs[0].shape == (size["items"],) and outs[0].dtype == torch.float32 and torch.isfinite(outs[0]).all()
    assert all(torch.equal(o, outs[0]) for o in outs[1:])  # the same kernels in the same order: bit-identical
    other = module("workload")
    assert not torch.equal(other.step(other.setup("cpu", 6)), outs[0])


def test_the_slow_step_empties_the_cache_after_every_layer_and_the_fix_never(count_empty_cache):
    slow = module("workload")
    state = slow.setup("cpu", 0)
    layers = len(state["model"])
    assert layers == 3 * slow.SMOKE_SIZE["blocks"] + 1 and 3 * slow.SIZE["blocks"] + 1 == 37
    slow.step(state)
    assert len(count_empty_cache) == layers
    count_empty_cache.clear()
    fixed = module("solution")
    fixed.step(fixed.setup("cpu", 0))
    assert count_empty_cache == []


def test_the_gpu_size_makes_16_mib_activations():
    size = module("workload").SIZE
    assert size["items"] * size["width"] * 2 == 16 * 2**20  # bf16: each > 10 MiB, so each its own cudaMalloc


def test_the_puzzle_sits_after_memory_timeline_in_the_curriculum():
    puzzles = catalog.load_catalog([catalog.BUILTIN])
    ids = [p.id for p in puzzles]
    p = puzzles[ids.index("allocator-churn")]
    assert ids.index("memory-timeline") < ids.index("allocator-churn") < ids.index("energy-precision")
    assert p.taxonomy[0] == p.check.planted == "allocator-churn" and p.check.metric == "time"
    assert p.check.speedup == 1.5 and tuple(p.tools) == ("torch-profiler",) and len(p.hints) == 4
    assert set(p.prerequisites) <= set(ids)


def recording(tmp_path: Path) -> replay.Evidence:
    """Artifacts shaped like the H100 recording: empty_cache() between layers (slow), the same layers with the
    cache kept (solution: no allocator calls)."""
    art = tmp_path / "artifacts"
    art.mkdir()
    layers_with_empty_cache(malloc_us=60.0, free_us=40.0).write(art / "slow.trace.json.gz")
    layers_with_empty_cache(malloc_us=0.0, free_us=0.0, free="").write(art / "solution.trace.json.gz")
    (art / "manifest.json").write_text(json.dumps({"gpu": "NVIDIA H100 80GB HBM3", "device": "cuda"}))
    (art / "measurements.json").write_text(json.dumps({
        "slow": {"median_ms": 3.0, "samples_ms": [3.0, 3.1]}, "solution": {"median_ms": 0.6, "samples_ms": [0.6, 0.61]},
        "speedup": {"point": 5.0, "ci_low": 4.8, "ci_high": 5.2, "bar": 1.5}, "check": {}}))
    return replay.Evidence(art, "allocator-churn")


def test_every_question_is_answered_from_such_a_recording(tmp_path):
    puzzle = spec.load(FOLDER / "puzzle.toml")
    ev = recording(tmp_path)
    got = {}
    for q in puzzle.questions:
        computed = questions.compute(q, ev)
        assert questions.grade(q, str(computed.value), computed).correct, q.key
        got[q.key] = computed.value
    assert got["cause"] == "allocator-churn" and got["calls"] == 24  # 12 blocks: one cudaMalloc, one cudaFree each
    assert got["alloc_ms"] > 12 * 0.1 and got["idle"] > 50 and got["speedup"] == 5.0  # a free's time holds its drain
    assert "allocator-churn" not in ev.report("solution").ids()


def test_the_h100_recording_shows_the_churn_and_the_fix_without_it():
    puzzle = spec.load(FOLDER / "puzzle.toml")
    ev = replay.recording(puzzle)
    if not ev.has("slow"):
        pytest.skip("not recorded yet: python3 scripts/record.py puzzle allocator-churn on the GPU machine")
    top = ev.report("slow").findings[0]
    assert top.id == "allocator-churn", [(f.id, f.gain_pct) for f in ev.report("slow").findings]
    # each of the 36 16-MiB layer outputs comes from cudaMalloc and goes back through cudaFree; a steady step
    # ends with the cache as it began, so it frees about what it allocates
    allocs, frees = top.evidence["allocs_per_step"], top.evidence["frees_per_step"]
    assert allocs >= 36 and frees >= 35 and abs(allocs - frees) <= 0.1 * allocs
    assert "allocator-churn" not in ev.report("solution").ids()
    assert ev.measurements()["speedup"]["ci_low"] >= puzzle.check.speedup
