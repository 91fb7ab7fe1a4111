"""The kernel doctor on every Nsight Compute report we have: the real ones other projects recorded
(../shared/real-traces, skipped when absent), the H100 fixtures and the puzzles' recordings. No finding calls
an idle unit the limit, and every finding's evidence holds the numbers that decide it (issue 15, item 6)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from test_ncu_fixtures import DATA, has_ncu_report
from perflab.doctor.ncu import diagnose_ncu

ROOT = Path(__file__).resolve().parents[2]
REAL = Path(__file__).resolve().parents[3] / "shared" / "real-traces"
GB10 = REAL / "ncu_nvllm_gb10_wo_split1.ncu-rep"
SCAN = REAL / "ncu_speedy_scan_rtx3070.ncu-rep"

REPORTS = sorted(DATA.glob("*.csv")) + sorted(ROOT.glob("src/perflab/catalog/*/artifacts/*.csv.gz"))
REAL_REPORTS = sorted(REAL.glob("*.ncu-rep")) if REAL.is_dir() and has_ncu_report() else []

# what decides each finding: these keys must be in its evidence (beyond the kernel's name and time share)
DECIDING = {
    "small-grid": {"grid_blocks", "sms", "waves_per_sm", "busiest_unit_pct"},
    "low-occupancy": {"achieved_occupancy_pct", "theoretical_occupancy_pct", "occupancy_limiter", "busiest_unit_pct"},
    "tail-effect": {"waves_per_sm", "idle_sm_time_pct"},
    "latency-bound": {"top_stalls", "top_stall_pct", "busiest_unit_pct"},
    "below-roof": {"busiest_unit_pct"},
    "uncoalesced-access": {"excess_sector_pct", "sectors_per_load_request", "memory_throughput_pct"},
    "poor-locality": {"excess_sector_pct", "l2_read_hit_pct", "memory_throughput_pct"},
    "l2-miss": {"l2_read_hit_pct", "dram_bytes", "compulsory_bytes_est", "excess_dram_bytes"},
    "register-spill": {"local_l1_bytes", "busiest_unit_pct"},
    "atomic-contention": {"atomic_instructions", "busiest_unit_pct"},
    "bank-conflicts": {"excess_wavefront_pct", "l1_throughput_pct"},
    "warp-divergence": {"threads_per_instruction"},
    "no-tensor-cores": {"fp32_tflops", "ffma_share_of_instructions_pct"},
    "tile-quantization": {"gemm_m", "gemm_n"},
}
AT_ZERO = re.compile(r"is its limit but runs at 0 %|\bat 0 % of (peak|DRAM)|-bound at 0 %")


def _check(report) -> None:
    for f in report.findings:
        assert not AT_ZERO.search(f.summary) and not AT_ZERO.search(report.verdict), f.summary
        assert f.evidence.get("kernel") and len(f.fix) > 20
        need = DECIDING.get(f.id, set())
        assert need <= set(f.evidence), (f.id, sorted(need - set(f.evidence)))
        if f.id in ("memory-bound", "compute-bound"):
            side = "memory_throughput_pct" if f.id == "memory-bound" else "compute_throughput_pct"
            at_roof = "limiting_unit_pct" in f.evidence
            named = f.evidence["limiting_unit_pct"] if at_roof else f.evidence.get(side)
            # the unit named as the limit is busy: at its roof, or at >= 20 % with the warps stalled on it
            assert named is not None and named >= (80 if at_roof else 20), (f.id, f.summary)


@pytest.mark.parametrize("path", REPORTS, ids=[f"{p.parent.parent.name}/{p.name}" for p in REPORTS])
def test_every_recorded_report_gets_findings_with_their_deciding_numbers(path):
    _check(diagnose_ncu(path))


@pytest.mark.parametrize("path", REAL_REPORTS, ids=[p.name for p in REAL_REPORTS])
def test_real_reports_read_without_crash_and_with_evidence(path):
    report = diagnose_ncu(path)
    assert report.findings
    _check(report)
    kernel = report.analyses["kernels"][0]
    assert kernel["limits"]["units_pct"] and kernel["ncu_rules"]["rules"]


def _real(path: Path):
    if not path.is_file() or not has_ncu_report():
        pytest.skip(f"{path.name} (../shared/real-traces) or the ncu_report module not available")
    return diagnose_ncu(path)


def test_gb10_gemv_is_a_grid_of_32_blocks_on_48_sms_not_a_register_limit():
    report = _real(GB10)
    top = report.findings[0]
    ev = top.evidence
    assert top.id == "small-grid" and top.severity == "high"
    assert (ev["grid_blocks"], ev["sms"]) == (32, 48) and ev["idle_sm_pct"] == pytest.approx(33.3, abs=0.1)
    assert ev["achieved_occupancy_pct"] == pytest.approx(8.3, abs=0.1) and ev["theoretical_occupancy_pct"] == pytest.approx(66.7, abs=0.1)
    assert ev["occupancy_limiter"] == "grid" and ev["theoretical_limiter"] == "registers"
    assert "limited by registers" not in top.summary and "low-occupancy" not in [f.id for f in report.findings]
    # GB10 reports no dram__ metrics: the memory side comes from ncu's memory throughput (~8 %), not 0
    limits = report.analyses["kernels"][0]["limits"]
    assert "no dram__ counters" in limits["memory_source"] and 7 < ev["busiest_unit_pct"] < 9
    assert report.analyses["kernels"][0]["ncu_rules"]["agree"]


def test_a_scan_moving_its_input_plus_output_is_latency_bound_on_barriers_not_l2_miss():
    report = _real(SCAN)
    ids = [f.id for f in report.findings]
    assert "l2-miss" not in ids
    top = report.findings[0]
    assert top.id == "latency-bound" and top.evidence["top_stall"] == "barrier"
    assert top.evidence["top_stall_pct"] == pytest.approx(57.7, abs=0.5) and "single-pass" in top.fix
    # 10 M int32 in and out: DRAM reads ~ the bytes written, the 57 % overall L2 hit rate counts the writes
    traffic = report.analyses["kernels"][0]["limits"]
    assert traffic["units_pct"]["DRAM"] == pytest.approx(53.4, abs=0.1)


def test_csv_exports_say_they_carry_no_ncu_rules():
    report = diagnose_ncu(DATA / "bank_conflicts.csv")
    assert "CSV export carries none" in report.analyses["ncu_rules_note"]
    assert "ncu_rules" not in report.analyses["kernels"][0]
