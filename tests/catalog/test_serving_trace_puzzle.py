"""serving-trace (catalog 31) on the CPU: the engine's vLLM-named iteration ranges in a torch.profiler trace, the
slow and fixed token budgets, the fix check's plumbing (the ITL p99 measured on the engine, the fix judged from its
own trace), and the doctor on traces of the puzzle's schedule at its GPU size, timed by the cost model that
chunked-prefill's recording measured on the same engine (the engine's bookkeeping with its forwards skipped: the
schedule without the arithmetic). The GPU recording is made on the device machine."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from perflab.analysis.steps.iterations import marked_iterations  # noqa: E402
from perflab.doctor import diagnose  # noqa: E402
from perflab.puzzles import questions  # noqa: E402
from perflab.puzzles.engine import catalog, checker, kinds, replay, runner  # noqa: E402
from perflab.trace.builders.synthetic import GEMM, TraceBuilder  # noqa: E402
from perflab.trace.kineto import load  # noqa: E402
from perflab.workloads import llama, serving  # noqa: E402

from conftest import served_variants  # noqa: E402

PUZZLE = catalog.get("serving-trace")
CHUNKED = catalog.get("chunked-prefill")


def load_variant(variant: str):
    return runner.load_module(PUZZLE.file(variant))


def test_every_iteration_runs_in_a_range_named_as_vllm_names_its_own(tmp_path):
    module = load_variant("slow")
    state = module.setup("cpu", 0)
    trace_path = tmp_path / "slow.trace.json.gz"
    runner.profile_steps(module, state, "cpu", trace_path, warmup=0, steps=1)
    engine = state["engine"]
    log = engine.log()
    it = marked_iterations(load(trace_path))
    assert it is not None and it.engine == "vLLM" and len(it) == engine.forwards
    assert it.prefill_tokens.tolist() == log["forwards"]["prefill_tokens"]
    assert it.decode_tokens.tolist() == log["forwards"]["live"]       # no prefill-only forward: live rows decode
    assert it.prefill_requests.tolist() == [int(t > 0) for t in log["forwards"]["prefill_tokens"]]
    assert engine.markers[0] == serving.iteration_name(1, 16, 0, 0)


def test_a_whole_prompt_prefill_decodes_nothing_in_its_iteration():
    state, _ = served_variants(CHUNKED)["slow"]
    engine = state["engine"]
    kinds_ = engine.log()["forwards"]["kind"]
    prompt = state["size"]["prompt"]
    assert {engine.markers[f] for f, k in enumerate(kinds_) if k == "prefill"} == {
        serving.iteration_name(1, prompt, 0, 0)}


@pytest.fixture(scope="module")
def served():
    return served_variants(PUZZLE)


def test_the_fix_gives_every_request_the_same_scores_with_a_smaller_budget(served):
    slow, fixed = served["slow"][1], served["solution"][1]
    lengths = served["slow"][0]["engine"].lengths
    assert slow.dtype == torch.float32 and slow.shape == (len(lengths), max(lengths))
    torch.testing.assert_close(fixed, slow, rtol=PUZZLE.check.rtol, atol=PUZZLE.check.atol, equal_nan=True)
    size = served["slow"][0]["size"]
    slow_log, fixed_log = (served[v][0]["engine"].log() for v in ("slow", "solution"))
    assert set(slow_log["forwards"]["kind"]) == set(fixed_log["forwards"]["kind"]) == {"mixed", "decode"}
    assert {t for t in slow_log["forwards"]["prefill_tokens"] if t} == {size["prompt"]}
    assert {t for t in fixed_log["forwards"]["prefill_tokens"] if t} == {load_variant("solution").SMOKE_CHUNK}


# --- the doctor on the puzzle's schedule at its GPU size ----------------------------------------------------------

def cost_model() -> dict:
    """Per variant of chunked-prefill's H100 recording (the same engine, model, prompt and chunk): a forward's time
    at 0 prompt tokens and its ms per 1,000 prompt tokens (serving.json's least-squares fit)."""
    doc = json.loads((CHUNKED.artifacts / "serving.json").read_text(encoding="utf-8"))
    return {v: (doc["variants"][v]["summary"]["forward_ms_at_0_tokens"],
                doc["variants"][v]["summary"]["forward_ms_per_1k_prefill_tokens"]) for v in ("slow", "solution")}


def gpu_size_schedule(variant: str) -> serving.Engine:
    """The variant's GPU-size stream through the engine's bookkeeping, its forwards skipped."""
    module = load_variant(variant)
    w = load_variant("slow")
    size = dict(w.SIZE, chunk=module.CHUNK) if variant == "solution" else w.SIZE
    lens = w.lengths(size)
    model = llama.build(llama.SMOKE, "cpu", 0, batch=size["slots"], max_seq=8)
    engine = serving.Engine(model, torch.zeros(size["requests"], size["prompt"], dtype=torch.long), lens,
                            size["slots"], graphs=False, chunk=size["chunk"],
                            answers=torch.zeros(size["requests"], max(lens), dtype=torch.long), arrivals=w.arrivals(size))
    engine._prefill = engine._decode = engine._mixed = lambda: None    # the schedule, not the arithmetic
    engine.reset()
    with torch.no_grad():
        w.serve(engine)
    return engine


def timed_trace(variant: str, path: Path) -> Path:
    """The variant's stream as its torch.profiler trace would hold it: one ProfilerStep, each iteration's range
    (the engine's own name) around one CUDA-graph replay, the host running ahead; GPU time from cost_model()."""
    engine = gpu_size_schedule(variant)
    base, per_1k = cost_model()["slow"]
    b = TraceBuilder()
    with b.step(0):
        for name, tokens in zip(engine.markers, engine.log()["forwards"]["prefill_tokens"]):
            ms = base + per_1k * tokens / 1e3
            with b.span(name, cat="user_annotation"):
                b.graph_replay([(GEMM, 1e3 * ms / 8)] * 8)
            b.python(60.0)     # the scheduler's bookkeeping between two iterations
        b.synchronize()        # outputs() copies the scores to the host
    for e in b.events:         # kernels that fill the GPU's SMs, as the engine's do in chunked-prefill's recording
        if e.get("cat") == "kernel":
            e["args"]["grid"] = [528, 1, 1]
    return b.write(path)


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    folder = tmp_path_factory.mktemp("serving-trace-artifacts")
    for variant in ("slow", "solution"):
        timed_trace(variant, replay.trace_file(folder, variant))
    return folder


def test_at_the_gpu_size_the_doctor_reads_the_stall_from_the_trace_and_the_fix_removes_it(recording):
    slow, fixed = (diagnose(replay.trace_file(recording, v)) for v in ("slow", "solution"))
    assert slow.findings[0].id == "prefill-stall" and slow.findings[0].severity == "high", slow.verdict
    assert "prefill-stall" not in [f.id for f in fixed.findings], fixed.verdict
    s, f = slow.analyses["serving"], fixed.analyses["serving"]
    assert s["clock"]["clock"] == "gpu" and s["engine"] == "vLLM" and s["tokens_from"] == "markers"
    assert s["itl_ms"]["p99"] / f["itl_ms"]["p99"] > PUZZLE.check.reduction   # the bar, from the cost model


def test_the_questions_compute_from_the_traces(recording):
    ev = replay.Evidence(recording, PUZZLE.id)
    got = {q.key: questions.compute(q, ev) for q in PUZZLE.questions}
    for q in PUZZLE.questions:
        assert questions.grade(q, str(got[q.key].value), got[q.key]).correct, q.key
    s, f = ev.report("slow").analyses["serving"], ev.report("solution").analyses["serving"]
    assert got["cause"].value == "prefill-stall" and got["clock"].value == "gpu"
    assert got["stall"].value == s["itl_p99_over_p50"]
    assert got["prefill-cost"].value == pytest.approx(cost_model()["slow"][1], rel=0.05)
    assert got["tail"].value == round(s["itl_ms"]["p99"] / f["itl_ms"]["p99"], 3)
    assert not grade(ev, "clock", "host") and not grade(ev, "cause", "padded-batch")


def grade(ev, key: str, answer: str) -> bool:
    q = next(q for q in PUZZLE.questions if q.key == key)
    return questions.grade(q, answer, questions.compute(q, ev)).correct


# --- the fix check ----------------------------------------------------------------------------------------------

def test_the_fix_check_measures_the_itl_p99_on_the_engine_and_judges_the_fix_from_its_trace(tmp_path):
    ref, fix = load_variant("slow"), load_variant("solution")
    chk = kinds.Checking(PUZZLE, PUZZLE.file("solution"), tmp_path, "cpu", 0, 2, lambda _p: None)
    chk.ref, chk.ref_state, chk.fix, chk.fix_state = ref, ref.setup("cpu", 0), fix, fix.setup("cpu", 0)
    chk.result = checker.CheckResult(PUZZLE.id, "fix", "cpu", checker.Correctness(True, 0))
    assert [k.name for k in kinds.kinds_for(PUZZLE)] == ["serving-trace", "trace"]
    result = kinds.first(PUZZLE, "measure", chk)
    assert result.speed.n == 2 and "itl_p99_ms" in result.speed.statistic and result.speed.bar == 2.5
    assert result.evidence.planted == "prefill-stall" and result.evidence.what == ""
    assert Path(result.evidence.trace).is_file()                       # the fix's own profile, read by the doctor
    assert marked_iterations(load(Path(result.evidence.trace))) is not None


def test_a_fix_that_crashes_under_the_profiler_fails_in_one_line(tmp_path):
    ref, fix = load_variant("slow"), load_variant("solution")
    chk = kinds.Checking(PUZZLE, PUZZLE.file("solution"), tmp_path, "cpu", 0, 2, lambda _p: None)
    chk.ref, chk.ref_state, chk.fix, chk.fix_state = ref, ref.setup("cpu", 0), fix, fix.setup("cpu", 0)
    chk.result = checker.CheckResult(PUZZLE.id, "fix", "cpu", checker.Correctness(True, 0))
    passes = []

    def step(state):
        passes.append(1)
        if len(passes) > chk.reps + 1:      # the timed passes and their warm-up run, then the profile fails
            raise ValueError("no more")
        return fix.step(state)

    chk.fix = type("Fix", (), {"step": staticmethod(step), "setup": fix.setup})
    result = kinds.first(PUZZLE, "measure", chk)
    assert not result.correctness.ok and result.correctness.message == "crashed while re-profiling: ValueError: no more"


def test_the_puzzle_toml():
    order = [p.id for p in catalog.load_catalog([catalog.BUILTIN])]
    assert order.index("serving-trace") == order.index("chunked-prefill") + 1
    assert PUZZLE.check.planted == "prefill-stall" and PUZZLE.check.metric == "itl_p99_ms"
    assert PUZZLE.tools == ("torch-profiler",)                  # no engine log: the trace is the evidence
    assert "perflab check serving-trace" in PUZZLE.file("starter").read_text(encoding="utf-8")
