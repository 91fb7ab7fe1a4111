"""A tensor-core GEMM whose warps wait on synchronous operand loads (no cp.async, no TMA) is latency-bound and
told to pipeline its loads; its low occupancy is what such a GEMM runs at, not the finding (issue 20,
async-copy-pipeline).

Recorded: puzzle 67-async-copy-pipeline on the H100 (its artifacts), one Triton bf16
GEMM (128x256x64 tiles, 8 warps, one block per SM either way) with num_stages=1 (`slow`: ld.global then
st.shared before every wgmma, warps on long_scoreboard) and num_stages=3 (`fast`: LDGSTS three stages deep,
1.9x faster at the same 12.5 % occupancy). Before the pipelining fix was added, `slow` was told to raise
occupancy by cutting registers: the one change that the fix does not make; after it, the finding was still
`low-occupancy` while its fix said not to add warps: a verdict its own fix contradicted.
"""
from __future__ import annotations

from test_ncu_fixtures import profile, puzzle_path, puzzle_report
from test_ncu_limiters import edited
from perflab.doctor.ncu import diagnose_profile
from perflab.trace.ncu import KernelProfile, NcuProfile, load

LDGSTS, TMA_LD = "smsp__inst_executed_op_ldgsts.sum", "smsp__inst_executed_op_tma_ld.sum"


def test_recorded_unpipelined_gemm_is_latency_bound_and_told_to_overlap_its_loads():
    report = puzzle_report("67-async-copy-pipeline", "slow")
    top = report.findings[0]
    assert top.id == "latency-bound" and top.severity in ("medium", "high")
    assert "low-occupancy" not in [f.id for f in report.findings]
    ev = top.evidence
    assert ev["async_copy_instructions"] == 0
    assert ev["top_stall"] == "long_scoreboard" and ev["top_stall_pct"] > 30
    assert [s["reason"] for s in ev["top_stalls"]][:2] == ["long_scoreboard", "barrier"]
    # the occupancy and its limiter stay in the evidence: one 8-warp block per SM, held there by registers
    assert abs(ev["achieved_occupancy_pct"] - 12.5) < 1 and ev["occupancy_limiter"] == "registers"
    assert ev["blocks_per_sm_limit"] == 1 and ev["registers_per_thread"] > 128
    assert ev["busiest_unit_pct"] < 60 and ev["tensor_pipe_pct"] < 40
    assert "cp.async" in top.fix and "num_stages" in top.fix and "synchronous loads" in top.summary
    assert "Raise resident warps" not in top.fix


def test_recorded_pipelined_gemm_has_no_latency_or_occupancy_finding():
    report = puzzle_report("67-async-copy-pipeline", "solution")
    assert not {"latency-bound", "low-occupancy"} & {f.id for f in report.findings}
    assert all(f.severity in ("info", "low", "medium") for f in report.findings)


def test_a_kernel_that_is_no_matmul_keeps_the_occupancy_advice():
    """low_occupancy (a streaming sum limited by its shared memory) issues no async copies either."""
    k = profile("low_occupancy", "csv").kernels[0]
    assert k.get(LDGSTS) == 0 and k.get(TMA_LD) == 0
    top = diagnose_profile(edited("low_occupancy")).findings[0]
    assert top.id == "low-occupancy" and top.fix.startswith("Raise resident warps")
    assert "async_copy_instructions" not in top.evidence


def test_a_report_without_the_copy_counters_cannot_tell_and_keeps_the_occupancy_advice():
    k = load(puzzle_path("67-async-copy-pipeline", "slow")).kernels[0]
    m = {n: v for n, v in k.metrics.items() if n not in (LDGSTS, TMA_LD)}
    report = diagnose_profile(NcuProfile(path="slow without copy counters", source="rep",
                                         kernels=[KernelProfile(0, k.name, k.full_name, m, dict(k.units))]))
    top = report.findings[0]
    assert top.id == "low-occupancy" and top.fix.startswith("Raise resident warps")
