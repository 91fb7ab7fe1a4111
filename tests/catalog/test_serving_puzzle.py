"""continuous-batching (catalog 18) and what it stands on, on the CPU: llama.forward_slots, the slot engine
(workloads/serving.py), the two schedules, the serving analyses (analysis/engines/serving.py), the serving evidence
kind and its questions. The GPU recording (CUDA graphs, timings) is made on the device machine."""
from __future__ import annotations

import math
import re
import statistics
from pathlib import Path

import pytest

from perflab.analysis.engines import serving as sa
from perflab.errors import PerflabError

torch = pytest.importorskip("torch")

from perflab.puzzles import questions  # noqa: E402
from perflab.puzzles.engine import catalog, kinds, replay, runner  # noqa: E402
from perflab.puzzles.evidence import serving as sv  # noqa: E402
from perflab.workloads import llama, serving  # noqa: E402

from conftest import served_variants  # noqa: E402

PUZZLE = catalog.get("continuous-batching")


def load(variant: str):
    return runner.load_module(PUZZLE.file(variant))


@pytest.fixture(scope="module")
def served():
    return served_variants(PUZZLE)


# -- llama.forward_slots ------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_forward_slots_is_the_batched_forward(dtype):
    dt = getattr(torch, dtype)
    a, b = (llama.build(llama.SMOKE, "cpu", 0, batch=3, max_seq=16, dtype=dt) for _ in range(2))
    tokens = torch.randint(0, llama.SMOKE["vocab"], (3, 5), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        la, lb = a(tokens, 0), b.forward_slots(tokens, torch.arange(5).expand(3, 5))
        torch.testing.assert_close(lb, la)
        for i in range(3):
            nxt = la.argmax(-1, keepdim=True)
            la, lb = a(nxt, 5 + i), b.forward_slots(nxt, torch.full((3, 1), 5 + i))
            torch.testing.assert_close(lb, la)


def test_a_slot_prefill_is_its_row_of_the_batched_prefill():
    batched, slotted = (llama.build(llama.SMOKE, "cpu", 0, batch=3, max_seq=16) for _ in range(2))
    tokens = torch.randint(0, llama.SMOKE["vocab"], (3, 6), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        rows = batched(tokens, 0)
        one = slotted.forward_slots(tokens[2:3], torch.arange(6)[None], torch.tensor([2]))
        torch.testing.assert_close(one, rows[2:3])
        assert torch.equal(slotted.layers[0].k_cache[2, :, :6], batched.layers[0].k_cache[2, :, :6])


# -- the engine and the two schedules -----------------------------------------------------------------
def test_the_fix_gives_every_request_the_slow_runs_tokens(served):
    slow, fixed = served["slow"][1], served["solution"][1]
    lengths = served["slow"][0]["engine"].lengths
    assert slow.dtype == torch.long and slow.shape == (len(lengths), max(lengths))
    assert torch.equal(fixed, slow)
    for r, n in enumerate(lengths):
        assert (slow[r, :n] >= 0).all() and (slow[r, n:] == -1).all()


def test_the_tokens_do_not_depend_on_the_schedule(served):
    """A third schedule, one request at a time in the last slot, gives the same tokens: rows are independent."""
    w = load("slow")
    state = w.setup("cpu", 5)

    def one_by_one(engine):
        for r in range(len(engine.lengths)):
            engine.prefill(r, engine.slots - 1)
            while not engine.finished(r):
                engine.decode()
            engine.release(engine.slots - 1)

    assert torch.equal(state["engine"].serve(one_by_one), served["slow"][1])


def test_forward_counts_are_the_engines(served):
    for variant, key in (("slow", "static_forwards"), ("solution", "continuous_forwards")):
        engine = served[variant][0]["engine"]
        counts = sa.forward_counts(engine.lengths, engine.slots)
        assert engine.forwards == counts[key], variant
        log = engine.log()
        assert log["forwards"]["kind"].count("prefill") == len(engine.lengths)
        assert sum(len(t) for t in log["token_forwards"]) == sum(engine.lengths)


def test_static_pads_while_requests_wait_and_continuous_does_not(served):
    slow, fixed = (sa.batch_use(served[v][0]["engine"].log()) for v in ("slow", "solution"))
    assert slow["padded_while_waiting_pct"] > 20 and fixed["padded_while_waiting_pct"] == 0
    assert slow["live_rows"] == fixed["live_rows"] and slow["decode_rows"] > fixed["decode_rows"]


def test_the_engine_refuses_schedules_that_lose_requests():
    engine = load("slow").setup("cpu", 0)["engine"]
    engine.reset()
    with torch.no_grad():
        engine.prefill(0, 0)
        with pytest.raises(RuntimeError, match="slot 0 still serves request 0"):
            engine.prefill(1, 0)
        with pytest.raises(RuntimeError, match="admitted twice"):
            engine.prefill(0, 1)
        with pytest.raises(RuntimeError, match="not served to the end"):
            engine.outputs()
        engine.release(0)
        with pytest.raises(RuntimeError, match="forward passes for"):
            for _ in range(engine.max_forwards):
                engine.decode()


def test_the_engines_forwards_read_nothing_back_to_the_host():
    """On the meta device every op that needs a tensor's values on the host (.item(), nonzero, a boolean
    mask) fails: the prefill and decode forwards that the engine captures as CUDA graphs have none."""
    model = llama.build(dict(llama.LLAMA_3_2_1B, layers=1, vocab=512, intermediate=256), "cpu", 0, batch=16,
                        max_seq=96).to("meta")
    prompts = torch.zeros(20, 32, dtype=torch.long, device="meta")
    engine = serving.Engine(model, prompts, [8] * 20, 16, graphs=False)
    with torch.no_grad():
        engine.prefill(3, 5)
        engine.decode()
    assert engine.forwards == 2 and engine.generated[3] == 2


# -- analysis/engines/serving.py ------------------------------------------------------------------------------
def hand_log():
    """2 slots: prefill r0 (ends 1 ms), prefill r1 (2), decode with both live (3), decode with r1 only (4)."""
    return {"slots": 2, "prompt_len": 4, "lengths": [2, 3],
            "forwards": {"kind": ["prefill", "prefill", "decode", "decode"], "live": [1, 1, 2, 1],
                         "waiting": [1, 0, 0, 0], "end_ms": [1.0, 2.0, 3.0, 4.0]},
            "token_forwards": [[0, 2], [1, 2, 3]]}


def test_request_metrics_and_summary_by_hand():
    reqs = sa.requests(hand_log())
    assert [(r["ttft_ms"], r["tpot_ms"], r["latency_ms"]) for r in reqs] == [(1.0, 2.0, 3.0), (2.0, 1.0, 4.0)]
    s = sa.summary(hand_log())
    assert (s["requests_per_s"], s["tokens_per_s"], s["makespan_ms"]) == (500.0, 1250.0, 4.0)
    assert s["padded_rows_pct"] == 25.0 and s["mean_live_rows"] == 1.5 and s["padded_while_waiting_pct"] == 0.0
    assert s["ttft_p50_ms"] == 1.5 and s["forwards"] == 4 and s["ms_per_forward"] == 1.0


def test_percentile_is_numpys():
    np = pytest.importorskip("numpy")
    xs = [5.0, 1.0, 9.5, 3.0, 7.25, 2.0]
    for q in (0, 10, 50, 90, 99, 100):
        assert math.isclose(sa.percentile(xs, q), float(np.percentile(xs, q)))
    assert math.isnan(sa.percentile([], 50))


def test_forward_counts_by_hand():
    c = sa.forward_counts([3, 1, 5, 2], 2)   # static: 4 + (3-1) + (5-1); continuous: slot frees at 2, 0, 4, 3
    assert (c["static_forwards"], c["continuous_forwards"], c["static_rows"]) == (10, 8, 16)
    assert c["ratio"] == 10 / 8 and c["continuous_decode_lower_bound"] == 4


def test_the_puzzles_numbers_follow_from_its_sizes():
    w = load("slow")
    c = sa.forward_counts(w.lengths(w.SIZE), w.SIZE["slots"])
    assert (c["static_forwards"], c["continuous_forwards"], c["tokens"], c["longest"]) == (1079, 439, 3421, 256)
    live = c["tokens"] - c["requests"]
    assert round(100 * (1 - live / (16 * c["static_decode_forwards"]))) == 79
    spread = [max(b) / statistics.median(b) for b in (w.lengths(w.SIZE)[i:i + 16] for i in range(0, 96, 16))]
    assert 3 <= min(spread) and max(spread) < 21                          # "3 to 20 times the batch's median"
    ratios = [sa.forward_counts(serving.output_lengths(96, 8, 256, s), 16)["ratio"] for s in range(10)]
    assert min(ratios) < c["ratio"] < max(ratios) and abs(c["ratio"] - statistics.median(ratios)) < 0.05
    cfg = dict(getattr(llama, w.SIZE["model"]), layers=w.SIZE["layers"])
    h, hd = cfg["hidden"], cfg["head_dim"]
    layer = h * hd * (2 * cfg["heads"] + 2 * cfg["kv_heads"]) + 3 * h * cfg["intermediate"]
    assert round(2 * (layer + h * cfg["vocab"]) / 1e9, 2) == 0.65          # bf16 bytes read per forward
    text = (PUZZLE.folder / "README.md").read_text(encoding="utf-8") + " ".join(PUZZLE.hints)
    for shown in ("1,079", "439", "2.46", "79 %", "3,421", "0.65 GB", "983", "343"):
        assert shown in text, shown
    assert f"**{c['ratio']:.2f}**" in text


# -- evidence and questions ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    folder = tmp_path_factory.mktemp("serving-artifacts")
    doc = sv.record_serving(PUZZLE, "cpu", folder)
    runner.write_json(folder / sv.FILE, doc)
    from perflab.puzzles.evidence.serving_plot import plot

    plot(doc, folder / sv.PLOT, title="test")
    return folder, doc


def test_the_recording_holds_both_runs_timed_and_a_plot(recording):
    folder, doc = recording
    assert doc["schema"] == sa.SCHEMA and set(doc["variants"]) == {"slow", "solution"}
    for variant, run in doc["variants"].items():
        ends = run["log"]["forwards"]["end_ms"]
        assert len(ends) == run["summary"]["forwards"] and ends == sorted(ends) and ends[0] > 0
    assert doc["analytic"]["static_forwards"] == doc["variants"]["slow"]["summary"]["forwards"]
    assert (folder / sv.PLOT).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_questions_compute_from_the_recording(recording):
    folder, doc = recording
    ev = replay.Evidence(folder, PUZZLE.id)
    got = {q.key: questions.compute(q, ev).value for q in PUZZLE.questions}
    slow, fixed = (doc["variants"][v]["summary"] for v in ("slow", "solution"))
    assert got["padding"] == round(slow["padded_rows_pct"], 4)
    assert got["forwards"] == round(doc["analytic"]["ratio"], 3)
    assert got["throughput"] == round(fixed["requests_per_s"] / slow["requests_per_s"], 3)
    ratio = questions.registry.ANALYSES["serving_ratio"]
    with pytest.raises(PerflabError, match="no number 'nope'"):
        ratio(ev, field="nope")
    with pytest.raises(PerflabError, match="no 'stage1' run"):
        questions.registry.ANALYSES["serving_metric"](ev, variant="stage1")


def checking(variant: str, state_fn=None) -> kinds.Checking:
    module = load(variant)
    chk = kinds.Checking(PUZZLE, PUZZLE.file(variant), Path("."), "cpu", 0, 1, lambda _p: None)
    chk.fix, chk.fix_state = module, (state_fn or module.setup)("cpu", 0)
    return chk


def test_the_fix_check_reads_the_fixs_own_log():
    """The serving doctor on the fix's own log: padded-batch gone for the solution, standing for the starter."""
    good = sv.fix_evidence(checking("solution"), None)
    assert good.ok and good.planted == PUZZLE.check.planted == "padded-batch"
    assert not any(f.startswith("padded-batch") for f in good.found)
    bad = sv.fix_evidence(checking("starter"), None)
    assert not bad.ok and re.search(r"padded-batch \((high|medium)\): \d+ % of the decode rows", " ".join(bad.found))
    lost = sv.fix_evidence(checking("solution", lambda d, s: {"no": "engine"}), None)
    assert not lost.ok and "state['engine']" in lost.found[-1]


def test_the_puzzle_toml():
    order = [p.id for p in catalog.load_catalog([catalog.BUILTIN])]
    assert order.index("continuous-batching") == order.index("batch-size-knee") + 1
    assert (PUZZLE.level, PUZZLE.check.speedup, PUZZLE.check.metric) == (2, 1.5, "time")
    assert "serving" in PUZZLE.tools and PUZZLE.check.planted == "padded-batch"
    assert "perflab check continuous-batching" in PUZZLE.file("starter").read_text(encoding="utf-8")
    assert any(k.name == "serving" for k in kinds.kinds_for(PUZZLE))


RECORDED = replay.recording(PUZZLE).has("slow")


@pytest.mark.skipif(not RECORDED, reason="not recorded yet: python3 scripts/record.py puzzle continuous-batching")
def test_the_recording_shows_the_cause_and_its_fix():
    """What the doctor's planted-finding test checks for trace puzzles (tests/catalog/test_puzzle_catalog.py), from the
    evidence that can see this cause: the engine's log."""
    ev = replay.recording(PUZZLE)
    slow, fixed = (sv.Serving().replay(ev, v)["summary"] for v in ("slow", "solution"))
    assert slow["padded_while_waiting_pct"] > 50 and fixed["padded_while_waiting_pct"] == 0
    check = ev.measurements()["check"]
    assert check["solution"]["passed"] and not check["starter"]["passed"]
    assert "serving log" in check["solution"]["evidence"]["what"] or "engine log" in check["solution"]["evidence"]["what"]
    # the cost model's premise: a forward costs about the same in both schedules (README, section 2)
    assert abs(slow["ms_per_forward"] / fixed["ms_per_forward"] - 1) < 0.25, (slow, fixed)
