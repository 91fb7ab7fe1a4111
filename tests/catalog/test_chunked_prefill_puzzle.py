"""chunked-prefill (catalog 19) on the CPU: the engine's mixed step (llama.forward_mixed), arrivals, teacher-forced
answers, the two schedules, the recording and its questions, the fix check's plumbing, and the doctor on both
schedules at the puzzle's GPU size with times from the cost model (the engine's bookkeeping with its forwards
skipped: the schedule without the arithmetic). The GPU recording is made on the device machine."""
from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from perflab.analysis.engines import serving_stalls as st  # noqa: E402
from perflab.doctor.serving import report  # noqa: E402
from perflab.puzzles import questions  # noqa: E402
from perflab.puzzles.engine import catalog, kinds, replay, runner  # noqa: E402
from perflab.puzzles.evidence import serving as sv  # noqa: E402
from perflab.workloads import llama, serving  # noqa: E402

from conftest import served_variants  # noqa: E402

PUZZLE = catalog.get("chunked-prefill")


def load(variant: str):
    return runner.load_module(PUZZLE.file(variant))


def test_a_mixed_forward_is_a_decode_and_a_prefill_chunk():
    a, b = (llama.build(llama.SMOKE, "cpu", 0, batch=3, max_seq=32, dtype=torch.float32) for _ in range(2))
    g = torch.Generator().manual_seed(1)
    dec, dpos = torch.randint(0, 256, (3, 1), generator=g), torch.tensor([[5], [7], [31]])
    chunk, cpos, slot = torch.randint(0, 256, (1, 4), generator=g), torch.arange(8, 12)[None], torch.tensor([2])
    with torch.no_grad():
        d, c = a.forward_slots(dec, dpos), a.forward_slots(chunk, cpos, slot)
        md, mc = b.forward_mixed(dec, dpos, chunk, cpos, slot)
    torch.testing.assert_close(md, d)
    torch.testing.assert_close(mc, c)
    torch.testing.assert_close(b.layers[0].k_cache, a.layers[0].k_cache)


@pytest.fixture(scope="module")
def served():
    return served_variants(PUZZLE)


def test_the_fix_gives_every_request_the_same_scores(served):
    slow, fixed = served["slow"][1], served["solution"][1]
    lengths = served["slow"][0]["engine"].lengths
    assert slow.dtype == torch.float32 and slow.shape == (len(lengths), max(lengths))
    for r, n in enumerate(lengths):
        assert torch.isfinite(slow[r, :n]).all() and torch.isnan(slow[r, n:]).all()
    torch.testing.assert_close(fixed, slow, rtol=2e-2, atol=1e-2, equal_nan=True)


def test_the_schedules_prefill_whole_and_in_chunks(served):
    slow, fixed = (served[v][0]["engine"].log() for v in ("slow", "solution"))
    size = served["slow"][0]["size"]
    assert set(slow["forwards"]["kind"]) <= {"prefill", "decode"}
    assert set(t for t in slow["forwards"]["prefill_tokens"] if t) == {size["prompt"]}
    assert "prefill" not in fixed["forwards"]["kind"]
    assert set(t for t in fixed["forwards"]["prefill_tokens"] if t) == {size["chunk"]}
    for log in (slow, fixed):   # nobody is served before it arrives: its first token after its arrival forward
        assert all(tf[0] > a for tf, a in zip(log["token_forwards"], log["arrival_forward"]))
        assert sum(len(t) for t in log["token_forwards"]) == sum(log["lengths"])


def test_the_engine_refuses_early_admissions_and_mixed_steps_without_chunks():
    engine = load("slow").setup("cpu", 0)["engine"]
    engine.reset()
    with torch.no_grad(), pytest.raises(RuntimeError, match="has not arrived"):
        engine.prefill(1, 0)
    plain = serving.Engine(llama.build(llama.SMOKE, "cpu", 0, batch=2, max_seq=16), torch.zeros(2, 4, dtype=torch.long),
                           [2, 2], 2, graphs=False)
    with torch.no_grad(), pytest.raises(RuntimeError, match="without chunk"):
        plain.mixed(0, 0)


def timed_by_cost_model(variant: str) -> dict:
    """The puzzle's GPU-size schedule (the engine's bookkeeping, its forwards skipped) with each forward timed by
    the README's cost model: a decode forward 0.6 ms, a whole 4,096-token prefill 5.5 ms, a mixed forward (a
    512-token chunk) 1.4 ms."""
    w = load(variant)
    size = w.SIZE
    lens = w.lengths(size)
    model = llama.build(llama.SMOKE, "cpu", 0, batch=size["slots"], max_seq=8)
    prompts = torch.zeros(size["requests"], size["prompt"], dtype=torch.long)
    answers = torch.zeros(size["requests"], max(lens), dtype=torch.long)
    engine = serving.Engine(model, prompts, lens, size["slots"], graphs=False, chunk=size["chunk"], answers=answers,
                            arrivals=w.arrivals(size))
    engine._prefill = engine._decode = engine._mixed = lambda: None    # the schedule, not the arithmetic
    engine.reset()
    with torch.no_grad():
        w.serve(engine)
    log = engine.log()
    cost, t, ends = {"prefill": 5.5, "decode": 0.6, "mixed": 1.4}, 0.0, []
    for k in log["forwards"]["kind"]:
        t += cost[k]
        ends.append(t)
    log["forwards"]["end_ms"] = ends
    return log


def test_at_the_gpu_size_the_doctor_finds_the_stall_and_the_fix_removes_it():
    slow, fixed = (report(st.from_engine_log(timed_by_cost_model(v)), {"kind": "serving"}) for v in ("slow", "solution"))
    assert slow.findings[0].id == "prefill-stall" and slow.findings[0].severity == "high"
    assert "prefill-stall" not in fixed.ids() and "padded-batch" not in fixed.ids()
    s, f = slow.analyses["stalls"], fixed.analyses["stalls"]
    assert s["itl_p99_ms"] / f["itl_p99_ms"] > PUZZLE.check.reduction    # the bar, from the cost model
    assert f["ttft_p50_ms"] > s["ttft_p50_ms"]                          # the price: a prompt takes 8 forwards


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    folder = tmp_path_factory.mktemp("chunked-artifacts")
    doc = sv.record_serving(PUZZLE, "cpu", folder)
    runner.write_json(folder / sv.FILE, doc)
    return folder, doc


def test_the_questions_compute_from_the_recording(recording):
    folder, doc = recording
    assert "analytic" not in doc and "arrival_forward" in doc["variants"]["slow"]["log"]
    ev = replay.Evidence(folder, PUZZLE.id)
    got = {q.key: questions.compute(q, ev).value for q in PUZZLE.questions}
    slow, fixed = (doc["variants"][v]["summary"] for v in ("slow", "solution"))
    assert got["stall"] == round(slow["itl_p99_over_p50"], 4)
    assert got["tail"] == round(slow["itl_p99_ms"] / fixed["itl_p99_ms"], 3)
    assert got["ttft"] == round(fixed["ttft_p50_ms"] / slow["ttft_p50_ms"], 3)
    assert got["prefill-cost"] == round(slow["forward_ms_per_1k_prefill_tokens"], 4)


def test_the_fix_check_measures_the_itl_p99_and_asks_the_doctor():
    ref, fix = load("slow"), load("solution")
    chk = kinds.Checking(PUZZLE, PUZZLE.file("solution"), Path("."), "cpu", 0, 2, lambda _p: None)
    chk.ref, chk.ref_state, chk.fix, chk.fix_state = ref, ref.setup("cpu", 0), fix, fix.setup("cpu", 0)
    from perflab.puzzles.engine import checker

    chk.result = checker.CheckResult(PUZZLE.id, "fix", "cpu", checker.Correctness(True, 0))
    result = kinds.first(PUZZLE, "measure", chk)
    assert result.speed.n == 2 and "itl_p99_ms" in result.speed.statistic and result.speed.bar == 2.5
    assert result.slow["n"] == 2 and result.evidence.what == sv.WHAT


def test_the_puzzle_toml():
    order = [p.id for p in catalog.load_catalog([catalog.BUILTIN])]
    assert order.index("chunked-prefill") == order.index("continuous-batching") + 1
    assert PUZZLE.check.planted == "prefill-stall" and PUZZLE.check.metric == "itl_p99_ms"
    assert "perflab check chunked-prefill" in PUZZLE.file("starter").read_text(encoding="utf-8")
