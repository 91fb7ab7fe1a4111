"""The doctor on real H100 traces that no rule was written from (recorded by scripts/ and perflab profile)."""
import os
from pathlib import Path

import pytest

from perflab.doctor import diagnose

DATA = Path(__file__).parents[1] / "data" / "kineto"


def test_back_to_back_large_gemms_are_healthy():
    report = diagnose(DATA / "h100_healthy_gemm.trace.json.gz")
    assert report.findings[0].id == "healthy" and "note" not in report.source["window"]
    assert all(f.severity in ("low", "info") for f in report.findings), [(f.id, f.severity) for f in report.findings]


def test_tiny_gpt_decode_blames_the_op_that_holds_the_host_not_the_views_around_it():
    # Every step the first layer's cuDNN attention spends ~40 ms on the CPU (a new KV length: a new
    # plan) before launching a 4 µs kernel; µs-long view ops between kernels are dispatch, not work.
    report = diagnose(DATA / "h100_tiny_gpt_profile.trace.json.gz")
    top = report.findings[0]
    assert top.id == "host-compute" and top.severity == "high"
    assert top.evidence["top_host_ops"][0] == "aten::_cudnn_attention_forward"
    assert "aten::_cudnn_attention_forward" in top.summary


def test_nothing_above_low_on_unpriced_kernels_heads_with_not_judged_and_keeps_the_low_notes():
    # a recorded H100 solution: one custom kernel per step, busy GPU, small launch gaps (a `low` note). The work
    # model cannot price the custom kernel: not judged is not healthy (issue 24), the headline says so
    trace = Path(__file__).resolve().parents[2] / "src/perflab/catalog/53-warp-divergence/artifacts/solution.trace.json.gz"
    report = diagnose(trace)
    ids = [f.id for f in report.findings]
    assert ids[0] == "not-judged" and len(ids) > 1 and "healthy" not in ids, ids
    assert report.findings[0].severity == "info" and all(f.severity == "low" for f in report.findings[1:])
    assert report.verdict.startswith("Not judged: 100% of the GPU time") and "busy" in report.verdict


def test_one_stalled_call_of_a_short_op_is_named_as_a_likely_descheduled_thread():
    # with-stack's solution checked on a busy H100 host: one aten::add of 72 took 3.37 ms (median 0.024 ms)
    hc = next(f for f in diagnose(DATA / "h100_busy_host_stray_call.trace.json.gz").findings if f.id == "host-compute")
    stray = hc.evidence["stray_call"]
    assert stray["op"] == "aten::add" and stray["calls"] == 72 and stray["longest_ms"] == 3.37
    assert "descheduled" in hc.summary and hc.fix.startswith("First profile again")


def test_the_profilers_own_step_bookkeeping_is_not_host_compute():
    # the same solution, another profile: prof.step() (torch/profiler frames, 0.1-0.3 ms a step) held the GPU
    # idle between ~1.8 ms steps; that is the measurement, not the workload (it was host-compute, medium)
    report = diagnose(DATA / "h100_profiler_step_in_window.trace.json.gz")
    hc = [f for f in report.findings if f.id == "host-compute"]
    assert all(f.severity == "low" for f in hc)
    assert not any(op.startswith("torch/profiler/") for f in hc for op in f.evidence["top_host_ops"])


CEILINGS = Path(__file__).parents[1] / "data" / "ncu" / "ceilings_h100_full.json"


def _save_ceilings(home, edit=None):
    import json

    data = json.loads(CEILINGS.read_text())
    if edit:
        edit(data)
    home.mkdir(parents=True, exist_ok=True)
    (home / "ceilings.json").write_text(json.dumps(data))


def test_healthy_gemms_against_the_ceiling_measured_on_the_same_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFLAB_HOME", str(tmp_path))
    _save_ceilings(tmp_path)
    top = diagnose(DATA / "h100_healthy_gemm.trace.json.gz").findings[0]
    assert top.id == "healthy" and top.evidence["gemm_path"] == "bf16"
    assert top.evidence["gemm_ceiling_tflops"] == 763.3
    assert 90 < top.evidence["gemm_pct_of_ceiling"] <= 101 and "at the speed of light" in top.summary


def test_gemms_far_below_the_ceiling_are_below_roof_with_the_numbers_and_the_ncu_command(tmp_path, monkeypatch):
    # a busy GPU is not a healthy one: against a (doctored) ceiling twice as high the GEMMs run at half their roof
    monkeypatch.setenv("PERFLAB_HOME", str(tmp_path))
    _save_ceilings(tmp_path, lambda d: d["results"]["matmul_bf16"].update(value=2 * d["results"]["matmul_bf16"]["value"]))
    report = diagnose(DATA / "h100_healthy_gemm.trace.json.gz")
    top = report.findings[0]
    assert top.id == "below-roof" and top.severity == "high" and "healthy" not in report.ids()
    mm = top.evidence["ops"][0]
    assert mm["op"] == "aten::mm" and 45 < mm["pct_of_roof"] < 55 and mm["bound"] == "compute"
    assert mm["sol_us_per_step"] < mm["time_us_per_step"]
    # ncu's filter is the kernel's whole function name; the skip counts the steps before the recorded ones
    assert top.evidence["ncu_command"].startswith("perflab ncu --kernel '^nvjet_sm90_tst_320x128")
    assert "--launch-count 1 --kill -- python YOUR_SCRIPT.py" in top.evidence["ncu_command"]
    assert all(op["sol_us_per_step"] > 0 for op in top.evidence["ops"])   # ops with no work are not judged


def test_ceilings_of_another_gpu_or_a_broken_file_are_not_used(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFLAB_HOME", str(tmp_path))
    _save_ceilings(tmp_path, lambda d: d["manifest"].update(gpu="NVIDIA A100-SXM4-80GB"))
    top = diagnose(DATA / "h100_healthy_gemm.trace.json.gz").findings[0]
    assert top.evidence["gemm_pct_of_ceiling"] is None and "A100" in top.evidence["gemm_ceiling_note"]
    assert top.evidence["gemm_tflops"] > 700
    (tmp_path / "ceilings.json").write_text("{not json")
    top = diagnose(DATA / "h100_healthy_gemm.trace.json.gz").findings[0]
    assert top.id == "healthy" and "perflab bench" in top.evidence["gemm_ceiling_note"]


def test_gemms_faster_than_the_bench_say_at_or_above(tmp_path, monkeypatch):
    # the bench's 8192^3 GEMM on random data runs hotter (lower clock) than these recorded H100 GEMMs
    monkeypatch.setenv("PERFLAB_HOME", str(tmp_path))
    _save_ceilings(tmp_path)
    trace = Path(__file__).resolve().parents[2] / "src/perflab/catalog/30-energy-precision/artifacts/solution.trace.json.gz"
    top = diagnose(trace).findings[0]
    assert top.id == "healthy" and top.evidence["gemm_pct_of_ceiling"] > 100
    assert "at or above the 763 TFLOP/s measured on this GPU" in top.summary


def test_ceilings_saved_beside_the_trace_come_before_this_machines(tmp_path, monkeypatch):
    # a recording's folder carries the ceilings of the GPU it was recorded on (a puzzle's artifacts/ceilings.json)
    import shutil

    monkeypatch.setenv("PERFLAB_HOME", str(tmp_path / "home"))
    _save_ceilings(tmp_path / "home", lambda d: d["manifest"].update(gpu="NVIDIA A100-SXM4-80GB"))
    trace = tmp_path / "run" / "h100_healthy_gemm.trace.json.gz"
    trace.parent.mkdir()
    shutil.copy(DATA / trace.name, trace)
    assert "A100" in diagnose(trace).findings[0].evidence["gemm_ceiling_note"]  # nothing beside it: this machine's
    _save_ceilings(trace.parent)
    top = diagnose(trace).findings[0]
    assert top.evidence["gemm_ceiling_tflops"] == 763.3 and "at the speed of light" in top.summary


def _peer(name):
    peer = Path(os.environ.get("PERFLAB_PEER_TRACES", Path(__file__).resolve().parents[3] / "shared" / "peer-traces" / "hta"))
    if not (peer / name).is_file():
        pytest.skip("peer traces not available")
    return peer / name


def test_a_peer_trace_whose_first_convolution_is_cudnn_warm_up():
    # the first convolution's 10.8 s on the host are mostly allocator calls (one cudaFree of 6 s): the idle
    # time is the allocator's (allocator-churn), and both findings say it is warm-up inside the window
    report = diagnose(_peer("critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz"))
    top = report.findings[0]
    assert top.id == "allocator-churn" and top.evidence["warmup_in_window"]["op"] == "aten::conv2d"
    assert "warm-up inside the profiled window" in top.summary and top.fix.startswith("First profile the steady state")
    host = next(f for f in report.findings if f.id == "host-compute")
    w = host.evidence["warmup_in_window"]
    assert w["op"] == "aten::cudnn_convolution" and w["calls"] == 10
    assert w["first_ms"] > 10_000 and w["median_ms"] < 2 and "warm-up" in host.summary


def test_host_time_inside_a_compiled_region_points_at_cuda_graphs():
    report = diagnose(_peer("triton_example__triton_example.json.gz"))
    # its one ProfilerStep lasts 13 s, but what was recorded in it ends after 1.5 ms: the report says so
    assert report.source["window"]["annotated_ms"] > 13_000 and report.source["window"]["analysed_ms"] < 2
    assert "percentages are of the recorded part" in report.source["window"]["note"]
    top = report.findings[0]
    assert top.id == "host-compute" and top.evidence["top_host_ops"][0].startswith("Torch-Compiled Region")
    assert 'mode="reduce-overhead"' in top.fix and "warmup_in_window" not in top.evidence


def test_the_host_op_share_is_of_the_host_idle_time_and_worded_by_size():
    # rank 0 of a sampled 128-rank job: many different host ops between its kernels, none holds most
    findings = diagnose(_peer("trace_filter__sampled_rank-0.json.gz")).findings
    # ~6% of step time is idle after the host had launched the work that ends it a median 2.6 ms before the GPU
    # ran it (analysis/idle/gaps.py, DEEP_QUEUE_US): the GPU was not waiting for the host then (it waited on
    # another stream, rank or work the trace does not hold), so that idle leaves host-compute for gpu-idle, which now leads
    assert findings[0].id == "gpu-idle" and findings[0].evidence["queued_ahead_idle_pct"] > 5
    top = next(f for f in findings if f.id == "host-compute")
    assert "the largest share of it is inside aten::_foreach_add_ (13%" in top.summary
    top = diagnose(_peer("amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz")).findings[0]
    assert "the host is mostly inside aten::add_ (84% of that idle time" in top.summary
