"""A serving engine's own trace: iterations found by the engine's markers, read on the clock that paces them, their
tokens and per-token latency, prefill stalls, and each iteration against its speed of light from the model."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from perflab.analysis.steps.iteration_markers import Marker, engine_marker, user_marker
from perflab.analysis.steps.iterations import serving_iterations
from perflab.doctor import diagnose
from perflab.errors import PerflabError
from perflab.trace.builders import synthetic_serving as ss
from perflab.trace.kineto import load

from conftest import cli_run

SHARED = Path(__file__).resolve().parents[3] / "shared" / "real-traces"
MODELS = Path(__file__).resolve().parents[1] / "data" / "models"


def _write(tmp_path, builder, name="serving.json.gz"):
    return builder.write(tmp_path / name)


@pytest.mark.parametrize("name, marker", [
    ("execute_context_0(0)_generation_4(4)", Marker("vLLM", 0, 0, 4, 4)),
    ("execute_context_1(888_788544)_generation_0(0)", Marker("vLLM", 1, 888, 0, 0, 788544)),
    ("execute_context_2(1024)_generation_30(30)", Marker("vLLM", 2, 1024, 30, 30)),
    ("execute_new_2_cached_5", Marker("vLLM", prefill_requests=2, decode_requests=5)),
    ("decode[bs=64 tok=64 d=64]", Marker("SGLang", 0, 0, 64, 64)),
    ("prefill[bs=1 tok=1024 ctx=1024]", Marker("SGLang", 1, 1024, 0, 0)),
    ("[Executor] _forward_step 12: 1 ctx reqs, 7 gen reqs", Marker("TensorRT-LLM", prefill_requests=1,
                                                                   decode_requests=7)),
])
def test_engine_markers_say_what_the_batch_held(name, marker):
    assert engine_marker(name) == marker


@pytest.mark.parametrize("name", ["aten::mm", "ProfilerStep#3", "nn.Module: LlamaForCausalLM", "prefill_tokens",
                                  "execute_model", "decode"])
def test_other_names_are_no_markers(name):
    assert engine_marker(name) is None


def test_a_user_marker_reads_its_named_groups():
    parse = user_marker(r"^step p=(?P<prefill>\d+) d=(?P<decode>\d+)$")
    assert parse("step p=512 d=7") == Marker("marker", -1, 512, -1, 7)
    assert parse("other") is None
    with pytest.raises(PerflabError, match="not a regular expression"):
        user_marker("step(")


def test_host_ahead_iterations_are_read_on_the_gpus_clock(tmp_path):
    trace = load(_write(tmp_path, ss.serving_loop(40)))
    it = serving_iterations(trace)
    assert it.engine == "vLLM" and len(it) == 40 and it.clock.gpu
    # the host's ranges end long before the GPU work each launched
    assert (it.work.gpu_end > it.host_end + 1000).mean() >= 0.9
    assert it.clock.lead_us > 1000 and it.tokens_from == "markers"
    # on the GPU's clock each iteration lasts at least its own GPU work
    assert (it.time_us + 1e-6 >= it.work.busy_us).all()
    prefill = it.prefill_tokens > 0
    assert prefill.sum() == 5 and np.median(it.time_us[prefill]) > 10 * np.median(it.time_us[~prefill])


def test_no_step_is_printed_shorter_than_its_own_gpu_time(tmp_path, capsys):
    report = diagnose(_write(tmp_path, ss.serving_loop(40)))
    s = report.analyses["summary"]
    sol = report.analyses["speed_of_light"]["step"]
    assert s["clock"] == "gpu" and s["steps"] == 40
    assert s["step_time_mean_ms"] * 1e3 >= sol["gpu_us"] * 0.999   # the step the figures are read against
    assert sol["step_us"] >= sol["gpu_us"] * 0.999
    assert "GPU's clock" in report.source["window"]["found_by"]
    code, out, _ = cli_run(capsys, "doctor", tmp_path / "serving.json.gz")
    assert code == 0 and "mean" in out and "on the GPU's clock" in out and "serving verdict" in out


@pytest.mark.parametrize("host_ahead", [True, False])
def test_a_long_prefill_in_the_decodes_iteration_is_a_prefill_stall(tmp_path, host_ahead):
    report = diagnose(_write(tmp_path, ss.serving_loop(40, host_ahead=host_ahead)))
    top = report.findings[0]
    assert top.id == "prefill-stall" and top.severity == "high" and top.level == "serving"
    ev = top.evidence
    assert ev["itl_p99_ms"] > 10 * ev["itl_p50_ms"] and ev["prefill_step_over_decode_step"] > 10
    assert ev["clock"] == ("gpu" if host_ahead else "host") and ev["engine"] == "vLLM"
    s = report.analyses["serving"]
    assert s["itl_ms"]["p99"] == pytest.approx(ev["itl_p99_ms"]) and s["tokens_per_iteration"]["prefill_max"] == 4096
    assert s["verdict"] == top.summary and top.events   # the longest prefilling iterations, named


def test_chunked_prefill_leaves_healthy_iterations(tmp_path):
    report = diagnose(_write(tmp_path, ss.serving_loop(40, chunk=512)))
    assert "prefill-stall" not in report.ids()
    s = report.analyses["serving"]
    assert s["itl_ms"]["p99"] < 2 * s["itl_ms"]["p50"] and s["verdict"].startswith("Healthy iterations")


def test_tokens_from_the_embeddings_shapes_where_the_markers_have_none(tmp_path):
    b = ss.serving_loop(16, embedding=True, every=8)
    for e in b.events:   # an engine whose markers name no tokens
        if e["name"].startswith("execute_context"):
            e["name"] = "execute_new_0_cached_8"
    trace = load(b.write(tmp_path / "t.json.gz"))
    it = serving_iterations(trace)
    # a packed batch ([N] indices) cannot say prefill from decode: unknown, not guessed, and the serving level
    # says what it lacks
    assert it.tokens_from == "" and (it.prefill_tokens == -1).all()
    assert "no token counts" in diagnose(trace).analyses["serving"]["cannot_judge"]
    # a generate loop's [batch, length] indices can: the first call prefills, the next ones decode
    b = ss.serving_loop(6, embedding=True, every=100)
    for e in b.events:
        if e["name"].startswith("execute_context"):
            e["name"] = "execute_new_0_cached_8"
        if e["name"] == "aten::embedding":
            e["args"]["Input Dims"] = [[128256, 4096], [8, 1]]
    it = serving_iterations(load(b.write(tmp_path / "g.json.gz")))
    assert it.tokens_from == "input shapes" and list(it.decode_tokens) == [8] * 6 and not it.prefill_tokens.any()


def test_graph_replays_are_priced_by_the_model(tmp_path):
    # Llama-3.2-1B in bf16 on an H100 (3.35 TB/s): a batch-1 decode reads its 2.47 GB of weights: 0.74 ms at the roof
    from perflab.analysis.work.model_config import load_model

    model = load_model("layers=16,hidden=2048,intermediate=8192,heads=32,kv_heads=8,vocab=128256,dtype=bf16,tied=1")
    assert model.weight_bytes_read(1) == pytest.approx(2.47e9, rel=0.01)
    slow = diagnose(_write(tmp_path, ss.serving_loop(20, decode=1, every=100, us_per_token=0, base_us=1000.0)),
                    model=model)
    roof = slow.analyses["serving"]["roof"]
    assert roof["priced_iterations"] == 20 and roof["by_kind"]["decode"]["bound"] == "memory"
    assert roof["pct_of_roof"] < 15 and "not-judged" not in slow.ids()
    assert [f for f in slow.findings if f.id == "below-roof" and "priced_iterations" in f.evidence]
    fast = diagnose(_write(tmp_path, ss.serving_loop(20, decode=1, every=100, us_per_token=0, base_us=100.0),
                           "f.json.gz"), model=model)
    # ten times less GPU time per iteration for the same bytes: that much nearer the roof, and judged near it
    assert fast.analyses["serving"]["roof"]["pct_of_roof"] > 8 * roof["pct_of_roof"]
    assert not [f for f in fast.findings if f.id == "below-roof" and "priced_iterations" in f.evidence]


def test_model_specs_and_their_errors(tmp_path):
    from perflab.analysis.work.model_config import load_model

    m = load_model(f"{MODELS / 'gpt-oss-120b.config.json'},tp=8,context=2048,kv_dtype=fp8")
    d = m.to_dict()
    assert d["name"] == "gpt-oss-120b" and 110 < d["params_b"] < 125 and d["tp"] == 8 and m.kv_bytes == 1.0
    assert m.experts == 128 and m.experts_per_token == 4
    # a batch of 4 tokens touches at most 16 of the 128 experts per layer; 888 tokens nearly all of them
    assert m.experts_touched(4) < 16 < m.experts_touched(888) <= 128
    q = load_model(str(MODELS / "qwen3.5-27b-nvfp4.config.json"))
    assert 26 < q.to_dict()["params_b"] < 28 and q.kv_layers == 16
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    for spec, words in ((str(bad), "not a JSON object"), ("layers=2,hidden=x", "not a number"),
                        ("layers=2,colour=red", "unknown field"), (str(tmp_path / "none.json"), "cannot read"),
                        ("layers=2", "lacks")):
        with pytest.raises(PerflabError, match=words):
            load_model(spec)


def test_doctor_cli_takes_a_marker_and_a_model(tmp_path, capsys):
    path = _write(tmp_path, ss.serving_loop(12))
    code, out, _ = cli_run(capsys, "doctor", path, "--json", "--model",
                           "layers=8,hidden=4096,intermediate=14336,heads=32,kv_heads=8,vocab=128256")
    assert code == 0 and json.loads(out)["analyses"]["serving"]["roof"]["priced_iterations"] == 12
    code, out, _ = cli_run(capsys, "doctor", path, "--json", "--marker", r"^execute_context_\d+\((?P<prefill>\d+)\)")
    assert code == 0 and json.loads(out)["analyses"]["serving"]["engine"] == "marker"
    code, _, err = cli_run(capsys, "doctor", path, "--marker", "(unclosed")
    assert code == 2 and "not a regular expression" in err and "Traceback" not in err
    code, _, err = cli_run(capsys, "doctor", path, "--model", "layers=x")
    assert code == 2 and "not a number" in err


def _shared(name):
    path = SHARED / name
    if not path.is_file():
        pytest.skip("shared traces not available")
    return path


def test_the_vllm_decode_trace_against_its_models_speed_of_light():
    # Qwen3.5-27B in NVFP4 on a GB10 (273 GB/s): 4 requests decoding reads ~16.2 GB of weights: ~59 ms at the roof;
    # the engine's iterations take ~77 ms on the GPU's clock (the host runs ~74 ms ahead)
    report = diagnose(_shared("nvllm_gb10_vllm_decode.json.gz"),
                      model=f"{MODELS / 'qwen3.5-27b-nvfp4.config.json'},kv_dtype=fp8")
    s = report.analyses["serving"]
    assert s["iterations"] == 10 and s["clock"]["clock"] == "gpu" and s["tokens_per_iteration"]["decode_mean"] == 4
    assert 70 < s["itl_ms"]["p50"] < 85
    roof = s["roof"]
    assert roof["priced_iterations"] == 10 and 65 < roof["pct_of_roof"] < 85
    assert "not-judged" not in report.ids()   # the model priced what the graph replays hide
    without = diagnose(_shared("nvllm_gb10_vllm_decode.json.gz"))
    assert without.findings[0].id == "not-judged"


def test_the_eager_vllm_prefill_on_b200():
    report = diagnose(_shared("tracelens_b200_vllm_eager.json.gz"),
                      model=f"{MODELS / 'gpt-oss-120b.config.json'},tp=8")
    s = report.analyses["serving"]
    assert s["iterations"] == 1 and s["tokens_per_iteration"]["prefill_max"] == 888
    row = s["roof"]["per_iteration"][0]
    assert row["kind"] == "prefill" and row["pct_of_roof"] < 5   # 87 ms for ~1 ms of work: the host holds it


def test_diff_compares_two_serving_traces_by_their_serving_figures(tmp_path, capsys):
    whole = _write(tmp_path, ss.serving_loop(40), "whole.json.gz")
    chunked = _write(tmp_path, ss.serving_loop(40, chunk=512), "chunked.json.gz")
    code, out, _ = cli_run(capsys, "diff", whole, chunked, "--json")
    assert code == 0
    d = json.loads(out)
    metrics = {m["name"]: m for m in d["metrics"]}
    assert metrics["itl_p99_ms"]["after"] < metrics["itl_p99_ms"]["before"] / 3
    assert "Per-token latency p50" in d["verdict"] and "prefill-stall" in d["verdict"]


def test_a_generate_loop_without_markers_is_read_through_its_embedding_lookups():
    # HF generate, eager, dynamic cache (tests/data/stacks): no marker, no ProfilerStep; each forward starts with
    # one aten::embedding of [4, 1] ids (the decodes) or [4, L] (a prompt)
    trace = load(Path(__file__).resolve().parents[1] / "data" / "stacks" / "hf_eager_dynamic_cold_3100_3750ms.trace.json.gz")
    it = serving_iterations(trace)
    assert it is not None and len(it) >= 10 and it.tokens_from == "input shapes"
    assert (it.decode_tokens[it.prefill_tokens == 0] == 4).all()
    s = diagnose(trace).analyses["serving"]
    # the slow iterations hold no prompt: cuDNN builds a plan for each new KV length (a one-time cost per shape)
    assert "no prefill explains" in s["verdict"]


def test_a_prompt_prefilled_in_an_iteration_of_its_own_stalls_the_running_decodes(tmp_path):
    # vLLM V0 without chunked prefill: execute_context_1(4096)_generation_0(0) between decode iterations; the running
    # requests' next token waits for it, though no decode token sits in that iteration
    report = diagnose(_write(tmp_path, ss.serving_loop(40, prefill_alone=True)))
    s = report.analyses["serving"]
    assert s["tokens_per_iteration"]["prefill_max"] == 4096 and s["iterations"] > 40
    top = report.findings[0]
    assert top.id == "prefill-stall", [f.id for f in report.findings]
    assert top.evidence["itl_p99_ms"] > 10 * top.evidence["itl_p50_ms"]
    assert top.evidence["stalled_with_prefill_pct"] == 100.0
