"""The doctor on real H100 traces that no rule was written from (recorded by scripts/ and perflab profile)."""
from pathlib import Path

from perflab.doctor import diagnose

DATA = Path(__file__).parent / "data" / "kineto"


def test_back_to_back_large_gemms_are_healthy():
    report = diagnose(DATA / "h100_healthy_gemm.trace.json.gz")
    assert report.findings[0].id == "healthy"
    assert all(f.severity in ("low", "info") for f in report.findings), [(f.id, f.severity) for f in report.findings]


def test_tiny_gpt_decode_blames_the_op_that_holds_the_host_not_the_views_around_it():
    # Every step the first layer's cuDNN attention spends ~40 ms on the CPU (a new KV length: a new
    # plan) before launching a 4 µs kernel; µs-long view ops between kernels are dispatch, not work.
    report = diagnose(DATA / "h100_tiny_gpt_profile.trace.json.gz")
    top = report.findings[0]
    assert top.id == "host-compute" and top.severity == "high"
    assert top.evidence["top_host_ops"][0] == "aten::_cudnn_attention_forward"
    assert "aten::_cudnn_attention_forward" in top.summary


def test_nothing_above_low_makes_healthy_the_headline_and_keeps_the_low_notes():
    # a recorded H100 solution: one kernel per step, busy GPU, small launch gaps (a `low` note)
    trace = Path(__file__).resolve().parents[1] / "src/perflab/catalog/53-warp-divergence/artifacts/solution.trace.json.gz"
    report = diagnose(trace)
    ids = [f.id for f in report.findings]
    assert ids[0] == "healthy" and len(ids) > 1, ids
    assert all(f.severity == "low" for f in report.findings[1:])
    assert "no system-level bottleneck" in report.verdict
