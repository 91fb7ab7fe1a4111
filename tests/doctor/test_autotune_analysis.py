"""Autotuning logs (analysis/work/autotune.py, doctor/autotune.py), their recorder (puzzles/evidence/autotune.py, with a stand-in
autotuner and timer), and the autotune questions (puzzles/questions/autotune.py)."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from perflab.analysis.work import autotune
from perflab.doctor import autotune as autotune_rules
from perflab.errors import PerflabError
from perflab.puzzles import questions

from perflab.puzzles.engine import replay
BIG = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3}
SMALL = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 256, "num_warps": 4, "num_stages": 4}


def log(decode_used=BIG, decode_ms=(0.300, 0.075), key=("N", "K")):
    return {"kernel": "matmul_kernel", "key_args": list(key), "sms": 132, "device": "NVIDIA H100 80GB HBM3",
            "cache": [{"key": ["8192", "8192", "torch.bfloat16"], "config": BIG}],
            "calls": [
                {"name": "prefill", "shape": {"M": 4096, "N": 8192, "K": 8192}, "config_used": BIG,
                 "timings": [{"config": BIG, "ms": 0.80}, {"config": SMALL, "ms": 3.1}]},
                {"name": "decode", "shape": {"M": 16, "N": 8192, "K": 8192}, "config_used": decode_used,
                 "timings": [{"config": BIG, "ms": decode_ms[0]}, {"config": SMALL, "ms": decode_ms[1]},
                             {"config": {"BLOCK_M": 16, "BLOCK_N": 512, "BLOCK_K": 256}, "ms": None}]}]}


def test_rows_compare_the_used_config_with_the_best_on_the_same_shape():
    prefill, decode = autotune.rows(log())
    assert prefill["slowdown"] == 1.0 and prefill["tile_waste_m_pct"] == 0.0 and prefill["used_ctas"] == 32 * 32
    assert decode["slowdown"] == pytest.approx(4.0) and decode["best"].startswith("16x64x256")
    assert decode["tile_waste_m_pct"] == 87.5 and decode["used_ctas"] == 32 and decode["best_ctas"] == 128
    assert decode["config_used.BLOCK_M"] == 128 and len(decode["timings"]) == 2  # the failed config is no candidate


def test_findings_name_the_miss_and_the_key_dimension_it_ignores():
    found = autotune_rules.findings(log())
    assert [f.id for f in found] == ["autotune-miss", "tile-quantization"]
    miss = found[0]
    assert miss.severity == "high" and miss.gain_pct == 75.0 and miss.evidence["shape_dims_not_in_key"] == "M"
    assert "ignores M" in miss.summary and found[1].gain_pct <= miss.gain_pct


def test_no_miss_when_each_shape_runs_its_best_config():
    assert autotune_rules.findings(log(decode_used=SMALL, key=("M", "N", "K"))) == []
    # within timing noise of the best: no miss, and the padding is worth at most what the best config saves
    found = autotune_rules.findings(log(decode_ms=(0.080, 0.075)))
    assert [(f.id, f.severity) for f in found] == [("tile-quantization", "low")] and found[0].gain_pct == 6.2


def test_unreadable_logs_are_one_line_errors(tmp_path):
    bad = tmp_path / "x.autotune.json"
    bad.write_text("{")
    with pytest.raises(PerflabError, match="not a readable autotuning log"):
        autotune.load(bad)
    bad.write_text("{}")
    with pytest.raises(PerflabError, match="no 'calls' list"):
        autotune.load(bad)
    with pytest.raises(PerflabError, match="has no timings"):
        autotune.analyze_call({"name": "decode", "timings": []})


def test_build_log_records_the_tuner_s_choice_and_every_config_s_time(monkeypatch):
    from perflab.puzzles.evidence import autotune as autotune_log

    class Cfg:
        def __init__(self, bm):
            self.kwargs, self.num_warps, self.num_stages = {"BLOCK_M": bm, "BLOCK_N": 64}, 4, 3

        def all_kwargs(self):
            return {**self.kwargs, "num_warps": 4, "num_stages": 3}

    configs = [Cfg(128), Cfg(16)]
    tuner = SimpleNamespace(configs=configs, keys=["N"], cache={}, best_config=None,
                            base_fn=SimpleNamespace(__name__="matmul_kernel"))
    launched = []

    def run():  # the autotuner: first call fills the cache (key without M), later calls reuse it
        tuner.cache.setdefault((64,), configs[0])
        tuner.best_config = tuner.cache[(64,)]

    module = SimpleNamespace(TUNED=tuner, tuned_calls=lambda state: [
        ("prefill", {"M": 256, "N": 64}, run, launched.append),
        ("decode", {"M": 16, "N": 64}, run, launched.append)])
    monkeypatch.setattr(autotune_log, "_bench", lambda fn: (fn(), 1.0 if launched[-1]["BLOCK_M"] == 16 else 2.0)[1])
    doc = autotune_log.build_log(module, {}, "GPU", 132)
    assert doc["key_args"] == ["N"] and doc["kernel"] == "matmul_kernel" and len(doc["cache"]) == 1
    decode = doc["calls"][1]
    assert decode["config_used"]["BLOCK_M"] == 128 and [t["ms"] for t in decode["timings"]] == [2.0, 1.0]
    assert autotune.rows(json.loads(json.dumps(doc)))[1]["slowdown"] == 2.0


def test_autotune_questions_read_the_recorded_logs(tmp_path):
    from perflab.puzzles.evidence.autotune import log_file
    from perflab.puzzles.engine.spec import Question

    (log_file(tmp_path, "slow")).write_text(json.dumps(log()))
    ev = replay.Evidence(tmp_path, "autotune")
    top = questions.ANALYSES["autotune_top_id"](ev)
    assert top.value == "autotune-miss" and top.evidence["slowdown"] == 4.0
    q = Question(key="bm", prompt="?", type="number", analysis="autotune_value",
                 args={"call": "decode", "field": "config_used.BLOCK_M"}, tolerance=0.01)
    c = questions.compute(q, ev)
    assert c.value == 128 and questions.grade(q, "128", c).correct and not questions.grade(q, "16", c).correct
    with pytest.raises(PerflabError, match="no call 'verify'"):
        questions.ANALYSES["autotune_value"](ev, field="slowdown", call="verify")
    with pytest.raises(PerflabError, match="no recorded solution autotuning log"):
        questions.ANALYSES["autotune_top_id"](ev, variant="solution")
