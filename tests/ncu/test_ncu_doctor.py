import json

import pytest

from test_ncu_fixtures import VALIDATION, fixtures, has_ncu_report, profile
from perflab.doctor.finding import SEVERITY_ORDER
from perflab.doctor.ncu import diagnose_profile
from perflab.trace.ncu import NcuProfile

SOURCES = ["csv"] + (["rep"] if has_ncu_report() else [])


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("name,planted", fixtures())
def test_planted_problem_ranks_first(name, planted, source):
    report = diagnose_profile(profile(name, source))
    assert report.findings[0].id == planted, [(f.id, f.severity, f.gain_pct) for f in report.findings]


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("name,expected", fixtures(VALIDATION))
def test_validation_kernels_get_the_id_a_person_would_name(name, expected, source):
    """Kernels recorded after the rules were written (a transpose, a GEMV, a naive matmul, ...)."""
    assert diagnose_profile(profile(name, source)).findings[0].id == expected


@pytest.mark.parametrize("name", [n for n, p in fixtures() + fixtures(VALIDATION) if p == "healthy"])
def test_healthy_kernels_raise_no_alarm(name):
    report = diagnose_profile(profile(name, "csv"))
    assert all(f.severity == "info" for f in report.findings)
    assert {f.id for f in report.findings} <= {"healthy", "memory-bound", "compute-bound"}
    assert report.verdict.startswith("Healthy")


@pytest.mark.parametrize("name,planted", [(n, p) for n, p in fixtures() if p != "healthy"])
def test_planted_findings_carry_evidence_fix_and_gain(name, planted):
    top = diagnose_profile(profile(name, "csv")).findings[0]
    assert top.severity in ("high", "medium") and 0 < top.gain_pct < 100
    # the gain is the point estimate of the fix's speed-up, inside the range the finding states
    ev = top.evidence
    lo, hi = ev["kernel_speedup_range"]
    assert 1.0 <= lo <= ev["kernel_speedup_est"] <= hi
    assert ev["kernel_gain_pct"] == pytest.approx(100 * (1 - 1 / ev["kernel_speedup_est"]), abs=0.3)
    assert top.evidence["kernel"] and len(top.evidence) >= 4 and len(top.fix) > 20
    assert not any(f.id == "healthy" for f in diagnose_profile(profile(name, "csv")).findings)


def test_findings_are_ranked_and_json_is_versioned():
    report = diagnose_profile(profile("tile_quantization", "csv"))
    keys = [(SEVERITY_ORDER[f.severity], -f.gain_pct) for f in report.findings]
    assert keys == sorted(keys)
    d = json.loads(json.dumps(report.to_dict(), default=str))
    assert d["schema"] == "perflab.doctor/2" and d["source"]["kind"] == "ncu"
    assert d["analyses"]["kernels"][0]["roofline"]["bound"] in ("memory", "compute")


def test_gains_are_weighted_by_kernel_time_share():
    a, b = profile("bank_conflicts", "csv"), profile("copy_vec16", "csv")
    both = diagnose_profile(NcuProfile(path="two", source="csv", kernels=a.kernels + b.kernels))
    alone = diagnose_profile(a).findings[0]
    top = both.findings[0]
    share = a.kernels[0].duration_s / (a.kernels[0].duration_s + b.kernels[0].duration_s)
    assert top.id == "bank-conflicts" and top.gain_pct == pytest.approx(alone.gain_pct * share, abs=0.2)
    assert not any(f.id == "healthy" for f in both.findings[:1])


def test_missing_metrics_degrade_instead_of_crashing():
    k = profile("bank_conflicts", "csv").kernels[0]
    keep = {"gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed"}
    from perflab.trace.ncu import KernelProfile

    thin = KernelProfile(index=0, name=k.name, full_name=k.full_name,
                         metrics={n: v for n, v in k.metrics.items() if n in keep})
    report = diagnose_profile(NcuProfile(path="thin", source="csv", kernels=[thin]))
    # only the SM side, at 5 %: nothing is at a roof and nothing says why; the doctor says so, how to record a
    # better report, and nothing above low (not "DRAM is its limit at 0 %")
    top = report.findings[0]
    assert top.id == "below-roof" and "no warp-state or memory throughput metrics" in top.summary
    assert "--set full" in top.fix and top.evidence["busiest_unit_pct"] == pytest.approx(5.05, abs=0.01)
    assert all(f.severity in ("low", "info") for f in report.findings)
    assert "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed" in report.source["notes"][0]
    at_roof = KernelProfile(index=0, name=k.name, full_name=k.full_name,
                            metrics={**thin.metrics, "sm__throughput.avg.pct_of_peak_sustained_elapsed": 92.0})
    found = diagnose_profile(NcuProfile(path="thin", source="csv", kernels=[at_roof])).findings
    assert "compute-bound" in [f.id for f in found] and found[0].severity == "info"  # measured at the roof: said


def test_fallback_metrics_still_find_bank_conflicts():
    """Without the source-counter ideal wavefronts, the l1tex bank-conflict counters decide."""
    k = profile("bank_conflicts", "csv").kernels[0]
    from perflab.trace.ncu import KernelProfile

    stripped = KernelProfile(index=0, name=k.name, full_name=k.full_name,
                             metrics={n: v for n, v in k.metrics.items() if not n.startswith("memory_l1_wavefronts")})
    assert diagnose_profile(NcuProfile(path="x", source="csv", kernels=[stripped])).findings[0].id == "bank-conflicts"


def test_gemm_shape_from_torch_nvtx_and_tile_from_names():
    from perflab.analysis.work.gemm_shapes import gemm_shape, gemm_tile

    assert gemm_shape(["aten::mm, seq = 3, sizes = [[4097, 512], [512, 1000]]"]) == (4097, 1000)
    assert gemm_shape(["aten::bmm, sizes = [[8, 264, 64], [8, 64, 300]]"]) == (264, 300)
    assert gemm_shape(["aten::addmm, sizes = [[1000], [33, 512], [512, 1000]]"]) == (33, 1000)
    assert gemm_shape(["nothing here"]) is None
    assert gemm_tile("nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT") == (320, 128)
    assert gemm_tile("gemm_bf16_wmma_tile128x128") == (128, 128)
    assert gemm_tile("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1") == (128, 256)
    assert gemm_tile("copy_vec16") is None


def test_a_tma_fed_gemm_with_a_little_local_memory_is_not_register_spill():
    """cuBLAS's sm90 TF32 GEMM (recorded on the H100 by the walk puzzle): its operands reach shared memory by
    TMA, so its only LSU sectors are 2.8 MB of local traffic, against 51 M shared-memory wavefronts on the
    same L1 data pipe (0.2 %); the SM runs at 88 % of peak. Not a spill worth a finding."""
    from pathlib import Path

    from perflab.trace.ncu import load

    folder = Path(__file__).parents[2] / "src" / "perflab" / "catalog" / "65-walk" / "artifacts" / "stage2.investigation"
    report = load(next(folder.glob("ncu-1-*.csv")))
    found = diagnose_profile(report).findings
    assert "register-spill" not in [f.id for f in found]
    assert found[0].id in ("healthy", "compute-bound")


def test_bank_conflicts_that_another_unit_would_hide_cost_little():
    """The walk's solution GEMM (cuBLAS TF32, H100): 25 % of its shared wavefronts are replays and L1/shared
    runs at 74 %, but the tensor pipe runs at 72 %: without the replays it sets the pace, so ~4 %, not 18 %."""
    from pathlib import Path

    from perflab.trace.ncu import load

    folder = Path(__file__).parents[2] / "src" / "perflab" / "catalog" / "65-walk" / "artifacts" / "solution.investigation"
    found = diagnose_profile(load(next(folder.glob("ncu-1-*.csv")))).findings
    bank = next(f for f in found if f.id == "bank-conflicts")
    assert bank.severity == "low" and bank.gain_pct == pytest.approx(3.6, abs=0.3)
    assert bank.evidence["next_unit"] == "tensor pipe" and "tensor pipe, at 72 % of peak, would set the pace" in bank.summary
    # where nothing else is busy, the replays cost what they are (the bank-conflicts fixture: 97 % replays)
    alone = diagnose_profile(profile("bank_conflicts", "csv")).findings[0]
    assert alone.id == "bank-conflicts" and alone.severity == "high" and "set the pace" not in alone.summary
