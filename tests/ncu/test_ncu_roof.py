"""Kernels at their roof rank as what they are (issue 24, item 3).

Fixtures: torch's float4 SiLU over 2^28 floats and `x + y` over two 2^28-float inputs, profiled on an H100
(ncu 2025.3.1 --set full --clock-control none, scripts/record.py stacks, 2026-11-27), converted to their raw
page by scripts/ncu_rep_to_csv.py. Both run at ~90 % of DRAM peak moving exactly their compulsory bytes.
Before this change, the same reports without ncu's source counters (a section set without SourceCounters)
read as `uncoalesced-access`, high ("16.0 sectors per load request; 4 when coalesced": 16 is what a warp's
16-byte loads touch), and the one-read-per-write estimate put `x + y` 1.5x over its compulsory bytes.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from test_ncu_limiters import edited, ids
from test_ncu_fixtures import profile
from perflab.doctor.ncu import diagnose_profile

SOURCE_COUNTERS = ("memory_l2_theoretical_sectors",)
BYTES_PER_SECTOR = ("smsp__sass_average_data_bytes_per_sector",)
# the original .ncu-rep files (5-7 MB, not shipped): point PERFLAB_ROOF_REPORTS at a folder holding them
RECORDED = Path(os.environ.get("PERFLAB_ROOF_REPORTS", "/nonexistent"))


@pytest.mark.parametrize("name", ["roof_silu", "roof_add"])
def test_a_kernel_at_its_dram_roof_with_its_compulsory_bytes_is_healthy(name):
    report = diagnose_profile(profile(name, "csv"))
    assert report.findings[0].id == "healthy"
    assert all(f.severity == "info" for f in report.findings)
    bound = next(f for f in report.findings if f.id == "memory-bound")
    assert bound.evidence["limiting_unit"] == "DRAM" and bound.evidence["limiting_unit_pct"] > 85
    # with the bytes the work needs: DRAM moves its compulsory bytes (every input read once, the output written)
    assert abs(bound.evidence["dram_bytes"] / bound.evidence["compulsory_bytes_est"] - 1) < 0.02
    assert "1.00x the bytes it must" in bound.summary or "0.99x the bytes it must" in bound.summary


@pytest.mark.parametrize("drop", [SOURCE_COUNTERS, SOURCE_COUNTERS + BYTES_PER_SECTOR])
def test_sixteen_sectors_per_request_of_float4_loads_are_not_uncoalesced(drop):
    """Without the source counters the width comes from the bytes used per sector (32 of 32: nothing
    wasted); without those either, only sectors beyond 16 per request (the widest access) count."""
    k = profile("roof_silu", "csv").kernels[0]
    spr = k.get("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum") / k.get("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum")
    assert spr == pytest.approx(16)
    report = diagnose_profile(edited("roof_silu", drop=drop))
    assert ids(report)[0] == "healthy"
    assert "uncoalesced-access" not in ids(report) and "poor-locality" not in ids(report)


def test_strided_stores_whose_sectors_never_reach_dram_cost_a_dram_bound_kernel_nothing():
    """The SiLU's stores edited to use 4 of every 32 bytes a warp touches (a stride of 8 floats, the other
    warps filling the rest of each sector in L2) with DRAM unchanged: L1 and L2 move 8x the store sectors,
    DRAM still only the output. No gain at DRAM, which limits the kernel."""
    k = profile("roof_silu", "csv").kernels[0]
    st = k.get("l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum")
    report = diagnose_profile(edited("roof_silu", drop=SOURCE_COUNTERS, set_={
        "smsp__sass_average_data_bytes_per_sector_mem_global_op_st.ratio": 4.0,
        "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum": 8 * st}))
    f = next(f for f in report.findings if f.id == "uncoalesced-access")
    assert f.severity == "info" and f.gain_pct < 3
    assert f.evidence["dram_waste_pct"] == pytest.approx(0, abs=1) and f.evidence["limit_after_fix"] == "DRAM"
    assert "cost nothing at DRAM" in f.summary
    assert report.findings[0].id != "uncoalesced-access" or report.findings[0].severity == "info"


def test_wasted_sectors_that_reach_dram_are_its_gain():
    """The SiLU's loads edited to use 8 of 32 bytes per sector with DRAM reads unchanged: DRAM moves
    the whole sectors, a quarter of them data. Coalescing would cut DRAM's bytes, so it is the gain."""
    report = diagnose_profile(edited("roof_silu", drop=SOURCE_COUNTERS, set_={
        "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio": 8.0}))
    top = report.findings[0]
    assert top.id in ("uncoalesced-access", "poor-locality") and top.severity == "high"
    assert top.evidence["dram_waste_pct"] == pytest.approx(37.5, abs=2)
    assert 25 < top.gain_pct < 40


def test_compulsory_bytes_count_every_input():
    """`x + y`: no L2 read hits, so every DRAM read is a first touch: the compulsory bytes are the two
    inputs read and the output written, which is what DRAM moved."""
    from perflab.analysis.ncu.ncu_traffic import dram_traffic

    t = dram_traffic(profile("roof_add", "csv").kernels[0])
    assert t.compulsory_bytes == pytest.approx(t.dram_read_bytes + t.written_bytes)
    assert t.compulsory_bytes == pytest.approx(3 * t.written_bytes, rel=0.01)
    assert t.excess_bytes < 0.01 * t.compulsory_bytes and "first touch" in t.compulsory_basis


@pytest.mark.skipif(not (RECORDED / "roof_add.ncu-rep").exists(), reason="the recorded .ncu-rep is not here")
@pytest.mark.parametrize("name", ["roof_silu", "roof_add"])
def test_the_csv_reads_as_its_report(name):
    from perflab.doctor.ncu import diagnose_ncu

    rep = diagnose_ncu(RECORDED / f"{name}.ncu-rep", prefer="auto")
    csv = diagnose_profile(profile(name, "csv"))
    assert [(f.id, f.severity, f.gain_pct) for f in rep.findings] == [(f.id, f.severity, f.gain_pct) for f in csv.findings]


def test_divergent_lanes_cost_a_kernel_at_its_dram_roof_nothing():
    """The SiLU edited to 8 active threads per instruction (of 32): the idle lanes waste SM issue slots, but
    DRAM at 90 % sets the kernel's time either way. Before: warp-divergence, 75 % x 30 % = medium."""
    report = diagnose_profile(edited("roof_silu", set_={"smsp__thread_inst_executed_per_inst_executed.ratio": 8.0}))
    f = next(f for f in report.findings if f.id == "warp-divergence")
    assert f.severity == "info" and f.gain_pct < 3
    assert ids(report)[0] == "healthy" or report.findings[0].severity == "info"


def test_healthy_heads_a_report_only_where_most_of_its_time_was_judged_at_the_roof():
    """Two kernels: the SiLU at its DRAM roof (10 % of the time) and one whose report lacks every throughput
    metric (90 %). Before: `healthy` headed the report. Now the kernel that holds the time and could not be
    judged does, and the verdict says it was not judged."""
    from perflab.trace.ncu import KernelProfile, NcuProfile

    silu = profile("roof_silu", "csv").kernels[0]
    blind = {n: v for n, v in silu.metrics.items() if "pct_of_peak" not in n and "throughput" not in n}
    blind["gpu__time_duration.sum"] = 9 * silu.get("gpu__time_duration.sum")
    both = NcuProfile(path="two kernels (edited)", source="csv", kernels=[
        KernelProfile(0, "silu", silu.full_name, dict(silu.metrics), dict(silu.units)),
        KernelProfile(1, "custom_kernel", "custom_kernel(float*)", blind, dict(silu.units))])
    report = diagnose_profile(both)
    assert report.findings[0].id != "healthy"
    assert "healthy" in ids(report)                       # the SiLU's own verdict stays
    assert not report.verdict.startswith("Healthy") and not report.verdict.startswith("Nothing to fix")


def test_the_converter_writes_a_raw_page_the_doctor_reads_as_the_report(tmp_path):
    """scripts/ncu_rep_to_csv.py on a shipped report: the CSV holds the same metrics and gets the same verdict."""
    import importlib.util

    pytest.importorskip("ncu_report")
    from perflab.doctor.ncu import diagnose_ncu
    from perflab.trace.ncu import load

    spec = importlib.util.spec_from_file_location("ncu_rep_to_csv", Path(__file__).parents[2] / "scripts" / "ncu_rep_to_csv.py")
    conv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conv)
    rep = Path(__file__).parents[1] / "data" / "ncu" / "uncoalesced_column.ncu-rep.gz"
    out = tmp_path / "u.csv"
    assert conv.main([str(rep), str(out)]) == 0
    assert conv.main([str(rep), str(out)]) == 2          # never over an existing file without --force
    a, b = load(rep, prefer="auto").kernels[0], load(out).kernels[0]
    shared = set(a.metrics) & set(b.metrics)
    assert len(shared) > 0.95 * len(a.metrics)
    assert all(a.metrics[n] == pytest.approx(b.metrics[n]) for n in shared if isinstance(a.metrics[n], float))
    key = lambda r: [(f.id, f.severity, f.gain_pct) for f in r.findings]
    assert key(diagnose_ncu(rep)) == key(diagnose_ncu(out))
