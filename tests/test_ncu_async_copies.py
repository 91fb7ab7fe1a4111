"""A tensor-core GEMM whose warps wait on synchronous operand loads (no cp.async, no TMA) is told to pipeline
its loads, not to add warps (issue 20, async-copy-pipeline).

Recorded: proto/async_copy_pipeline.py on the H100 (proto/artifacts/async_copy_pipeline), one Triton bf16
GEMM (128x256x64 tiles, 8 warps, one block per SM either way) with num_stages=1 (`slow`: ld.global then
st.shared before every wgmma, warps on long_scoreboard) and num_stages=3 (`fast`: LDGSTS three stages deep,
1.9x faster at the same 12.5 % occupancy). On the head before this, `slow` was told to raise occupancy by
cutting registers: the one change that the fix does not make.
"""
from __future__ import annotations

from test_ncu_fixtures import profile, proto_path, proto_report
from test_ncu_limiters import edited
from perflab.doctor.ncu import diagnose_profile
from perflab.trace.ncu import KernelProfile, NcuProfile, load

LDGSTS, TMA_LD = "smsp__inst_executed_op_ldgsts.sum", "smsp__inst_executed_op_tma_ld.sum"


def test_recorded_unpipelined_gemm_is_told_to_overlap_its_loads():
    top = proto_report("async_copy_pipeline", "slow").findings[0]
    assert top.id == "low-occupancy" and top.evidence["async_copy_instructions"] == 0
    assert top.evidence["top_stall"] == "long_scoreboard"
    assert "cp.async" in top.fix and "num_stages" in top.fix and "synchronous loads" in top.summary


def test_recorded_pipelined_gemm_has_no_occupancy_finding():
    report = proto_report("async_copy_pipeline", "fast")
    assert "low-occupancy" not in [f.id for f in report.findings]
    assert all(f.severity in ("info", "low", "medium") for f in report.findings)


def test_a_kernel_that_is_no_matmul_keeps_the_occupancy_advice():
    """low_occupancy (a streaming sum limited by its shared memory) issues no async copies either."""
    k = profile("low_occupancy", "csv").kernels[0]
    assert k.get(LDGSTS) == 0 and k.get(TMA_LD) == 0
    top = diagnose_profile(edited("low_occupancy")).findings[0]
    assert top.id == "low-occupancy" and top.fix.startswith("Raise resident warps")
    assert "async_copy_instructions" not in top.evidence


def test_a_report_without_the_copy_counters_cannot_tell_and_keeps_the_occupancy_advice():
    k = load(proto_path("async_copy_pipeline", "slow")).kernels[0]
    m = {n: v for n, v in k.metrics.items() if n not in (LDGSTS, TMA_LD)}
    report = diagnose_profile(NcuProfile(path="slow without copy counters", source="rep",
                                         kernels=[KernelProfile(0, k.name, k.full_name, m, dict(k.units))]))
    top = report.findings[0]
    assert top.id == "low-occupancy" and top.fix.startswith("Raise resident warps")
