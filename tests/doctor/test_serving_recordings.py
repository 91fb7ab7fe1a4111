"""The serving and compiled programs recorded on the H200 under perflab profile (tests/data/serving/manifest.json),
read on the CPU as the GPU checks read them there."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from perflab.doctor import diagnose

DATA = Path(__file__).resolve().parents[1] / "data" / "serving"
MODEL = "layers=16,hidden=2048,intermediate=8192,heads=16,kv_heads=4,vocab=32000,dtype=bf16"   # serving_loop.py's


def test_whole_prefills_stall_the_decodes_and_chunking_ends_it():
    whole = diagnose(DATA / "h200_serving_loop_whole.trace.json.gz", model=MODEL)
    chunked = diagnose(DATA / "h200_serving_loop_chunked.trace.json.gz", model=MODEL)
    top = whole.findings[0]
    assert top.id == "prefill-stall" and top.evidence["clock"] == "gpu"
    sw, sc = whole.analyses["serving"], chunked.analyses["serving"]
    # a 3,072-token prefill in the decodes' iteration: ~37 ms against ~3 ms for a decode-only iteration
    assert sw["steps"]["prefill_forward_p50_ms"] > 10 * sw["steps"]["decode_forward_p50_ms"]
    assert sw["itl_ms"]["p99"] > 10 * sw["itl_ms"]["p50"]
    # 512-token chunks: every decode waits a little longer, none waits a whole prompt
    assert "prefill-stall" not in chunked.ids() and sc["verdict"].startswith("Healthy iterations")
    assert sc["itl_ms"]["p99"] < sw["itl_ms"]["p99"] / 3
    # the decodes' roof from the model: the iterations are judged, none left not-judged
    assert sw["roof"]["priced_iterations"] == sw["iterations"] and "not-judged" not in whole.ids()


@pytest.mark.parametrize("name", ["h200_hf_static_compiled", "h200_block_reduce_overhead"])
def test_graph_replays_are_priced_from_the_capture_recorded_in_warm_up(name):
    path = DATA / f"{name}.trace.json.gz"
    with gzip.open(path, "rt") as fh:
        assert json.load(fh)["perflab_captures"] >= 1
    report = diagnose(path)
    assert report.analyses["speed_of_light"]["step"]["coverage_pct"] >= 90
    assert "not-judged" not in report.ids()


def test_fp32_attention_on_the_h200_is_no_tensor_cores():
    report = diagnose(DATA / "h200_fp32_attention.trace.json.gz")
    assert report.findings[0].id == "no-tensor-cores" and "healthy" not in report.ids()
