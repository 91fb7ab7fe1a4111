"""The doctor judges busy GPUs by the work they do against the H100's ceilings (issue 15's two traces, recorded on
the H100 by scripts/record.py sol-traces on 2026-11-24; measurements.json holds the timings of the same run)."""
import json
from pathlib import Path

import pytest

from perflab.doctor import diagnose

DATA = Path(__file__).parents[1] / "data" / "kineto"
MEASURED = json.loads((DATA / "h100_sol.measurements.json").read_text())


def report(name):
    return diagnose(DATA / f"h100_sol_{name}.trace.json.gz")


def sol_step(rep):
    return rep.analyses["speed_of_light"]["step"]


def test_eager_fp8_weight_only_decode_is_dequant_overhead_not_healthy():
    rep = report("fp8_wo_eager_mlp")
    top = rep.findings[0]
    assert top.id == "dequant-overhead" and top.severity == "high" and "healthy" not in rep.ids()
    assert top.evidence["bytes_per_weight_element_today"] >= 15 and top.evidence["bytes_per_weight_element_fused"] == 1
    # GPU busy, but the time goes to widening the weights: the step moves ~10x the bytes of the bf16 step
    assert rep.analyses["summary"]["gpu_busy_pct"] > 90


def test_the_speed_of_light_gap_explains_the_measured_fp8_slowdown():
    fp8, bf16 = report("fp8_wo_eager_mlp"), report("bf16_eager_mlp")
    measured = MEASURED["slowdown"]["fp8_wo_eager_mlp_vs_bf16"]       # ~10.8x, timed with CUDA events
    bytes_ratio = sol_step(fp8)["sol_us"] / sol_step(bf16)["sol_us"]  # the ops as written, at the DRAM roof
    assert measured == pytest.approx(bytes_ratio, rel=0.25), (measured, bytes_ratio)
    # the fix the finding names (read the fp8 weights in the matmul) is faster than bf16, as the bytes say
    top = fp8.findings[0]
    assert top.evidence["fused_sol_ms_per_step"] * 1e3 < MEASURED["bf16_eager_mlp"]["median_ms"] * 1e3 / 2
    assert top.gain_pct > 100 * (1 - 1 / measured) * 0.8


def test_bf16_decode_gemvs_run_near_the_dram_roof():
    rep = report("bf16_eager_mlp")
    mm = rep.analyses["speed_of_light"]["families"]["matmul"]
    assert mm["pct_of_roof"] > 70 and "dequant-overhead" not in rep.ids()
    assert rep.findings[0].id == "launch-overhead"   # 7 kernels in 0.24 ms steps: the GPU waits for the CPU


def test_attention_written_out_at_s2048_is_unfused_not_healthy():
    rep = report("attention_by_hand")
    top = rep.findings[0]
    assert top.id == "unfused-elementwise" and top.severity == "high" and "healthy" not in rep.ids()
    assert top.evidence["attention_written_out_per_step"] == 1
    assert "scaled_dot_product_attention" in top.fix
    assert top.evidence["bytes_per_step_gb"] > 50 * top.evidence["fused_bytes_per_step_gb"]


def test_the_attention_gap_explains_the_measured_slowdown_and_sdpa_does_not_beat_the_speed_of_light():
    by_hand, sdpa = report("attention_by_hand"), report("attention_sdpa")
    measured = MEASURED["slowdown"]["attention_by_hand_vs_sdpa"]      # ~12x
    top = by_hand.findings[0]
    predicted_after = top.evidence["fused_sol_ms_per_step"]            # the fused attention at its roof
    sdpa_gpu_ms = sol_step(sdpa)["modelled_gpu_us"] / 1e3
    assert predicted_after <= sdpa_gpu_ms                              # SDPA cannot beat the fused speed of light
    assert top.evidence["time_ms_per_step"] / sdpa_gpu_ms == pytest.approx(measured, rel=0.5)
    assert "unfused-elementwise" not in sdpa.ids()


@pytest.mark.parametrize("name", ["fma_basic", "fma_throughput", "gemm_bf16_torch"])
def test_an_fma_only_kernel_and_a_cublas_bf16_gemm_are_compute_bound_with_nothing_above_low(name):
    """Recorded on the H100: work at the compute roof is no problem to report, whatever its DRAM traffic."""
    from perflab.doctor.ncu import diagnose_profile
    from perflab.trace.ncu import load

    found = diagnose_profile(load(DATA.parent / "ncu" / f"{name}.csv")).findings
    assert found[0].id in ("healthy", "compute-bound") and "compute-bound" in [f.id for f in found]
    assert all(f.severity in ("low", "info") for f in found), [(f.id, f.severity) for f in found]
