"""The serving doctor (doctor/serving.py, analysis/engines/serving_stalls.py, analysis/engines/serving_files.py) outside the catalog.

Fixtures in tests/data, laid out as the benchmarks write them (tests/data/make_serving_fixtures.py, which made
them from a simulated server, cites the fields): vLLM's `vllm bench serve --save-result --save-detailed`
(vllm/benchmarks/serve.py in vllm-project/vllm: input_lens, output_lens, ttfts, itls in seconds, start_times,
errors, and mean/median/p99 _ttft/_tpot/_itl _ms), the same without --save-detailed (aggregates only), and
SGLang's `python -m sglang.bench_serving --output-file X.jsonl --output-details` (python/sglang/bench_serving.py in
sgl-project/sglang: one JSON line per run; no start times). The puzzles' engine log is checked by hand-made logs
whose times follow a cost model, so the rules are tested on numbers that decide them.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from perflab.analysis.engines import serving_stalls as st
from perflab.doctor import diagnose
from perflab.doctor.serving import report
from perflab.errors import UnreadableInput
from perflab.trace import sniff
from perflab.analysis.engines.serving_files import load_stream

DATA = Path(__file__).parents[1] / "data"
WHOLE, CHUNKED = DATA / "vllm_bench_serve_whole_prefill.json", DATA / "vllm_bench_serve_chunked_prefill.json"
AGGREGATES, SGLANG = DATA / "vllm_bench_serve_aggregates_only.json", DATA / "sglang_bench_serving.jsonl"


def test_the_files_are_recognised_by_content(tmp_path):
    for f in (WHOLE, CHUNKED, AGGREGATES, SGLANG):
        renamed = tmp_path / "result.txt"
        renamed.write_bytes(f.read_bytes())
        assert sniff.sniff(renamed) == sniff.SERVING, f


def test_vllm_whole_prompt_prefills_stall_the_decodes():
    rep = diagnose(WHOLE)
    top = rep.findings[0]
    assert top.id == "prefill-stall" and top.severity == "high" and top.level == "serving"
    e = top.evidence
    doc = json.loads(WHOLE.read_text())
    flat = [x * 1e3 for itl in doc["itls"] for x in itl]
    assert math.isclose(e["itl_p99_ms"], float(__import__("numpy").percentile(flat, 99)), rel_tol=1e-3)
    assert e["itl_p99_over_p50"] >= 3 and e["stalled_with_prefill_pct"] >= 50
    # the simulated server costs 0.05 ms per prompt token: the fit of gap against prompt tokens finds it
    assert 40 < e["ms_per_1k_prefill_tokens"] < 60
    assert any("padded-batch" in c for c in rep.analyses["cannot_judge"])
    assert "Cannot judge: padded-batch" in rep.verdict


def test_vllm_chunked_prefill_is_healthy():
    rep = diagnose(CHUNKED)
    assert rep.ids() == ["healthy"] and rep.findings[0].evidence["itl_p99_over_p50"] < 2


def test_aggregates_only_say_what_they_cannot_judge():
    rep = diagnose(AGGREGATES)
    assert rep.findings == []
    doc = json.loads(AGGREGATES.read_text())
    assert f"p99 {doc['p99_itl_ms']:.3g} ms" in rep.verdict and "Cannot judge" in rep.verdict
    assert "--save-detailed" in rep.verdict


def test_sglang_jsonl_judges_the_last_run_as_a_burst():
    loaded = load_stream(SGLANG)
    assert loaded.source["format"] == "SGLang bench_serving" and loaded.source["runs_in_file"] == 2
    assert loaded.stream.placed and set(loaded.stream.arrival_ms) == {0.0}
    rep = diagnose(SGLANG)
    assert rep.findings[0].id == "prefill-stall"


def test_without_start_times_a_stream_that_was_not_a_burst_cannot_be_judged(tmp_path):
    lines = SGLANG.read_text().splitlines()
    last = json.loads(lines[-1])
    last["request_rate"] = 4.0
    f = tmp_path / "rate4.jsonl"
    f.write_text(json.dumps(last) + "\n")
    rep = diagnose(f)
    assert rep.findings == [] and "no request start times" in rep.verdict
    assert rep.analyses["stalls"]["itl_p99_ms"] > rep.analyses["stalls"]["itl_p50_ms"]   # the gaps are still there


def test_not_a_serving_record(tmp_path):
    f = tmp_path / "x.json"
    f.write_text('{"token_forwards": []}')          # sniffs as a serving record, holds none
    with pytest.raises(UnreadableInput, match="not a serving record"):
        diagnose(f)
    f.write_text('{"ttfts": 3, "itls": 4}')         # per-request keys that are not lists: read as aggregates only
    assert diagnose(f).findings == []


def test_the_cli_reports_the_numbers(capsys):
    from conftest import cli_run

    rc, out, _ = cli_run(capsys, "doctor", WHOLE, "--json")
    assert rc == 0, out
    doc = json.loads(out)
    assert doc["findings"][0]["id"] == "prefill-stall" and doc["source"]["format"] == "vLLM bench serve"
    assert "tpot_p99_ms" in doc["findings"][0]["evidence"]


# -- the engine log, by a cost model -------------------------------------------------------------------------
def engine_log(kinds, prefill_tokens, live, waiting, token_forwards, cost, slots=4, arrivals=None):
    ends, t = [], 0.0
    for k, n in zip(kinds, prefill_tokens):
        t += cost(k, n)
        ends.append(t)
    return {"slots": slots, "prompt_len": max(prefill_tokens), "lengths": [len(x) for x in token_forwards],
            "chunk": 0, "forwards": {"kind": kinds, "live": live, "waiting": waiting, "prefill_tokens": prefill_tokens,
                                     "end_ms": ends},
            "token_forwards": token_forwards, "arrival_forward": arrivals or [-1] * len(token_forwards)}


def stream_of(whole: bool):
    """Request 0 decodes 60 tokens; requests 1..3 (one token each) arrive and are prefilled (4,096 tokens) whole or
    in 8 chunks of 512 that ride along with request 0's decodes."""
    kinds, tok, live, tf = [], [], [], [[] for _ in range(4)]
    kinds.append("prefill"), tok.append(4096), live.append(1), tf[0].append(0)
    for i in range(60):
        if i in (10, 30, 50):
            r = (10, 30, 50).index(i) + 1
            if whole:
                kinds.append("prefill"), tok.append(4096), live.append(1), tf[r].append(len(kinds) - 1)
        chunk = whole is False and any(a <= i < a + 8 for a in (10, 30, 50))
        kinds.append("mixed" if chunk else "decode"), tok.append(512 if chunk else 0), live.append(1)
        tf[0].append(len(kinds) - 1)
        if chunk and i in (17, 37, 57):
            tf[(17, 37, 57).index(i) + 1].append(len(kinds) - 1)
    # decode 0.5 ms, 1 ms per 1,000 prompt tokens (compute-bound prefill)
    return engine_log(kinds, tok, live, [0] * len(kinds), tf, lambda k, n: (0.5 if k != "prefill" else 0.1) + n / 1e3)


def test_engine_log_whole_prefills_are_a_prefill_stall_and_chunks_are_not():
    slow = report(st.from_engine_log(stream_of(True)), {"kind": "serving"})
    assert slow.findings[0].id == "prefill-stall"
    steps = slow.analyses["stalls"]["steps"]
    assert math.isclose(steps["forward_vs_prefill_tokens"]["ms_per_1k_prefill_tokens"], 1.0, rel_tol=0.2)
    assert slow.findings[0].evidence["prefill_step_over_decode_step"] > 2
    fixed = report(st.from_engine_log(stream_of(False)), {"kind": "serving"})
    assert "prefill-stall" not in fixed.ids()


def test_many_short_prefills_in_a_row_are_not_a_long_prefill():
    """A static batch's admissions: 4 prefills of 8 tokens back to back, each as long as a decode forward. The
    decoding request waits 4 forwards, but no step is long: padded-batch's business, not prefill-stall's."""
    kinds = ["prefill"] * 4 + ["decode"] * 20
    log = engine_log(kinds, [8] * 4 + [0] * 20, [1] * 4 + [4] * 5 + [1] * 15, [0] * 24,
                     [[0] + list(range(4, 24)), [1, 4, 5, 6, 7, 8], [2, 4, 5, 6, 7, 8], [3, 4, 5, 6, 7, 8]],
                     lambda k, n: 0.5)
    rep = report(st.from_engine_log(log), {"kind": "serving"})
    assert "prefill-stall" not in rep.ids()


def test_padding_while_requests_wait_is_a_padded_batch():
    kinds = ["decode"] * 10
    log = engine_log(kinds, [0] * 10, [1] * 10, [5] * 10, [list(range(10))], lambda k, n: 0.5, slots=4)
    p = st.padding(st.from_engine_log(log).steps)
    assert p["padded_while_waiting_pct"] == 75.0 and p["occupancy"] == {"1": 10}
    assert p["forwards_saved_if_filled"] == 7.5 and p["gain_pct"] == 75.0
    rep = report(st.from_engine_log(log), {"kind": "serving"})
    assert rep.findings[0].id == "padded-batch" and rep.findings[0].severity == "high"
    log["forwards"]["waiting"] = [0] * 10       # nobody waited: an idle server, nothing to fill the rows with
    assert "padded-batch" not in report(st.from_engine_log(log), {"kind": "serving"}).ids()


def test_list_finds_the_serving_puzzles_by_tag(capsys):
    from conftest import cli_run

    for tag, puzzle in (("prefill-stall", "chunked-prefill"), ("padded-batch", "continuous-batching")):
        rc, out, _ = cli_run(capsys, "list", "--tag", tag)
        assert rc == 0 and puzzle in out, out
