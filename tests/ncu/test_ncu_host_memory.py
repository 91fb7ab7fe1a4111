"""A kernel that reads host memory over PCIe (zero-copy: mapped pinned memory, UVA pointers, host-resident
managed memory) is memory-bound on the PCIe link when the link's time for those bytes is most of the
kernel's, whatever its DRAM and L2 say (issue 20, zero-copy).

The recorded cases are puzzle 05-zero-copy on the H100 (its artifacts): one pass summing 256 MB
that lives in pinned host memory (`slow`: read through the mapped pointer, 5.3 ms, DRAM at 0 %) and the same
kernel on a device copy (`fast`: DRAM at 89 %). On the head before this rule `slow` was latency-bound
("no unit near its ceiling, warps stall on long_scoreboard"), which sends its reader after bytes in flight.
"""
from __future__ import annotations

import pytest

from test_ncu_fixtures import puzzle_report
from test_ncu_limiters import edited
from perflab.doctor.ncu import diagnose_profile

SYSMEM = "lts__t_sectors_srcunit_tex_aperture_sysmem_op_read.sum"
READS = "lts__t_sectors_srcunit_tex_op_read.sum"
GEN5_X16 = {"device__attribute_gpu_pci_ext_gpu_link_rate": 32000, "device__attribute_gpu_pci_ext_gpu_link_width": 16}
LINK = 32e9 * 16 / 8 * 128 / 130      # bytes/s


def host_reader(host_share: float, link_pct: float, *, link_known: bool = True):
    """latency_chain (warps waiting on loads, every unit idle) edited into a kernel reading 64 MB, a share
    `host_share` of it from host memory, for as long as the link needs at `link_pct` % of its ceiling;
    without `link_known` the report lacks the link's rate and width (another ncu, another platform)."""
    total = 64e6 / 32
    host = 32 * host_share * total
    return edited("latency_chain", drop=() if link_known else ("device__attribute_gpu_pci_ext_gpu_link",),
                  set_={SYSMEM: host_share * total, READS: total,
                        "gpu__time_duration.sum": host / LINK / (link_pct / 100), **(GEN5_X16 if link_known else {})})


def recorded(variant: str):
    return puzzle_report("05-zero-copy", {"fast": "solution"}.get(variant, variant))


def test_a_kernel_whose_reads_come_over_the_pcie_link_is_bound_by_the_link():
    report = diagnose_profile(host_reader(1.0, 85.0))
    top = report.findings[0]
    assert top.id == "memory-bound" and top.evidence["memory_unit"] == "PCIe (host memory)", (top.id, top.summary)
    assert top.evidence["memory_throughput_pct"] == pytest.approx(85, abs=0.5)
    assert top.evidence["limiting_unit_pct"] == pytest.approx(85, abs=0.5)         # at the link's roof
    assert top.evidence["pcie_link_gbps"] == pytest.approx(63.0, abs=0.1)
    assert top.evidence["host_read_bytes"] == pytest.approx(64e6)
    assert "latency-bound" not in [f.id for f in report.findings] and "read more than once" in top.fix


def test_below_half_the_links_time_or_half_the_reads_it_is_not_the_limit():
    for share, pct in ((1.0, 30.0), (0.2, 85.0)):
        report = diagnose_profile(host_reader(share, pct))
        assert all(f.evidence.get("memory_unit") != "PCIe (host memory)" for f in report.findings), (share, pct)


def test_without_the_links_width_and_rate_the_doctor_claims_no_pcie_limit():
    report = diagnose_profile(host_reader(1.0, 85.0, link_known=False))
    assert all(f.evidence.get("memory_unit") != "PCIe (host memory)" for f in report.findings)


def test_recorded_zero_copy_pass_is_bound_by_pcie():
    report = recorded("slow")
    top = report.findings[0]
    assert top.id == "memory-bound" and top.severity == "high" and top.evidence["memory_unit"] == "PCIe (host memory)"
    assert top.evidence["host_read_bytes"] == 256 << 20 and top.evidence["host_share_of_reads_pct"] == 100
    assert 70 <= top.evidence["memory_throughput_pct"] <= 95           # ~50 GB/s of a 63 GB/s Gen5 x16 link
    assert "latency-bound" not in [f.id for f in report.findings]


def test_recorded_pass_over_a_device_copy_is_healthy_at_the_dram_roof():
    report = recorded("fast")
    assert {f.id for f in report.findings} == {"memory-bound", "healthy"}
    assert all(f.severity == "info" and f.evidence.get("limiting_unit") == "DRAM" for f in report.findings)
