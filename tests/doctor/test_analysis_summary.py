"""evidence_summary: the contract the puzzle engine reads (docs/CONTRACTS.md)."""
from __future__ import annotations

import json

import pytest

from perflab.analysis.work.kernels import classify, is_simt_gemm
from perflab.analysis.idle.launches import launch_stats
from perflab.analysis.idle.memcpy import direction, is_pageable
from perflab.analysis.reports.summary import evidence_summary
from perflab.analysis.idle.timeline import busy_idle
from perflab.analysis.steps.windows import analysis_windows
from perflab.trace import kineto
from perflab.trace.builders import synthetic

KEYS = {"device", "steps", "step_time_ms", "span_ms", "gpu_busy_pct", "kernels_per_step", "mean_kernel_us",
        "top_kernels", "copies", "syncs", "clock"}
SPREAD = {"step_time_mean_ms", "step_time_p90_ms", "step_time_p99_ms"}   # where the windows are the steps


def load(tmp_path, builder):
    return kineto.load(builder.write(tmp_path / "t.json"))


def test_contract_keys_and_plain_types(tmp_path):
    s = evidence_summary(load(tmp_path, synthetic.decode_with_item(steps=2, tokens=5)))
    assert set(s) == KEYS | SPREAD
    assert json.loads(json.dumps(s)) == s  # plain Python values only
    assert set(s["copies"]) == {"h2d", "d2h", "d2d"}
    assert set(s["copies"]["d2h"]) == {"count", "bytes", "total_us", "pageable_count", "gbps"}
    assert set(s["syncs"]) == {"count", "per_step", "names"}
    assert all(set(k) == {"name", "total_us", "count", "pct"} for k in s["top_kernels"])


def test_numbers_of_a_known_workload(tmp_path):
    s = evidence_summary(load(tmp_path, synthetic.decode_with_item(steps=2, tokens=5, layers=3)))
    assert s["device"] == synthetic.H100 and s["steps"] == 2
    assert s["kernels_per_step"] == 5 * (3 * 2 + 1)
    # per token: .item() (copy to the host + sync) and the id sent back (copy + sync)
    assert s["syncs"]["per_step"] == 10 and s["syncs"]["names"]["aten::item"] == 10
    assert s["copies"]["d2h"]["count"] == 10 and s["copies"]["d2h"]["pageable_count"] == 10
    assert s["copies"]["d2h"]["bytes"] == 40 and s["copies"]["h2d"]["bytes"] == 80
    assert {k["name"] for k in s["top_kernels"]} == {synthetic.GEMM, synthetic.ELEMENTWISE, synthetic.ARGMAX}
    assert abs(sum(k["pct"] for k in s["top_kernels"]) - 100) < 1e-6
    assert 0 < s["gpu_busy_pct"] < 100 and s["step_time_ms"] > 0


def test_step_time_counts_the_gpu_work_of_a_host_that_runs_ahead(tmp_path):
    s = evidence_summary(load(tmp_path, synthetic.gpu_bound(steps=4, layers=10, kernel_us=1000.0)))
    assert s["step_time_ms"] == pytest.approx(10.02, rel=0.01)  # 10 GEMMs of 1 ms + an add
    assert s["gpu_busy_pct"] > 99


def test_without_steps_the_gpu_span_is_analysed(tmp_path):
    b = synthetic.TraceBuilder()
    for _ in range(20):
        b.op("aten::mm", [(synthetic.GEMM, 100.0)])
    b.synchronize()
    s = evidence_summary(load(tmp_path, b))
    assert s["steps"] == 0 and s["step_time_ms"] == pytest.approx(s["span_ms"])
    assert s["kernels_per_step"] == 20 and s["syncs"]["count"] == 1


def test_busy_per_device_stream_and_step(tmp_path):
    t = load(tmp_path, synthetic.pageable_inputs(steps=3, pageable=False))
    busy = busy_idle(t, analysis_windows(t))
    assert {s["stream"] for s in busy["streams"]} == {7, 9}
    assert len(busy["steps"]) == 3 and all(0 <= s["gpu_busy_pct"] <= 100 for s in busy["steps"])
    stats = launch_stats(t, analysis_windows(t))
    assert stats["kernels_per_step"] == 40 and stats["launch_delay_us"]["p50"] >= 0


@pytest.mark.parametrize("name, kind", [
    ("nvjet_tst_192x192_64x4_1x2_h_bz_coopB_TNT", "gemm"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64", "gemm"),
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_64x64_8x5_nn_align1>(...)", "gemm"),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4> >", "attention"),
    ("fmha_cutlassF_f16_aligned_64x64_rf_sm80", "attention"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "communication"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >", "elementwise"),
    ("triton_poi_fused_add_mul_0", "elementwise"),
    ("triton_red_fused_sum_1", "reduction"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, MeanOps> >", "reduction"),
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 128, true, 1, true>", "reduction"),
    ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw", "conv"),
    ("Memcpy HtoD (Pageable -> Device)", "memcpy"),
    ("Memset (Device)", "memset"),
])
def test_kernel_types(name, kind):
    assert classify(name) == kind


def test_simt_gemm_names():
    assert is_simt_gemm("volta_sgemm_128x64_nn") and is_simt_gemm("cutlass_80_simt_sgemm_64x64_8x5_nn_align1")
    assert is_simt_gemm("sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_ffma")
    assert not is_simt_gemm("sm80_xmma_gemm_tf32f32_tf32f32_f32_tn_n") and not is_simt_gemm("nvjet_tst_64x8")
    assert not is_simt_gemm("ampere_bf16_s16816gemm_bf16_128x128")


def test_copy_names():
    assert [direction(n) for n in ("Memcpy HtoD (Pinned -> Device)", "Memcpy DtoH (Device -> Pageable)",
                                   "Memcpy DtoD (Device -> Device)", "Memcpy PtoP (Device -> Device)")] == \
        ["h2d", "d2h", "d2d", "d2d"]
    assert is_pageable("Memcpy DtoH (Device -> Pageable)") and not is_pageable("Memcpy HtoD (Pinned -> Device)")
