"""One model of a kernel's time ranks every kernel finding by what its fix would save (analysis/ncu/kernel_time.py):
a partial last wave, a 2x sector over-fetch, a missing tensor-core path, re-reads of the inputs and contention
compare on one scale, and each finding states the range its fix lies in and a point estimate inside it.

The model is checked on its own numbers, then on kernels recorded on the H100 (tests/data/ncu) edited into the
cases the doctor got wrong: each edit says what it stands for."""
from __future__ import annotations

from pathlib import Path

import pytest

from test_ncu_fixtures import DATA, has_ncu_report, profile
from test_ncu_limiters import FLOP_COUNTERS, INSTRUCTION_STATS, edited
from perflab.analysis.ncu.kernel_time import FLOOR_PACE, PRACTICAL, Fix, estimate
from perflab.analysis.ncu.ncu_sol import Units
from perflab.doctor.ncu import diagnose_ncu, diagnose_profile

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT.parent / "shared" / "real-traces"
E = ".avg.pct_of_peak_sustained_elapsed"


def ids(report) -> list[str]:
    return [f.id for f in report.findings]


def test_the_fix_ends_when_its_most_loaded_unit_is_done():
    """1000 us, DRAM 30 % and L1 90 % busy; removing 80 % of L1's work leaves DRAM (300 us of work) the limit."""
    u = Units(memory={"DRAM": 30.0, "L1/shared": 90.0}, compute={"FMA pipe": 10.0})
    est = estimate(u, 1000.0, Fix(kept={"L1/shared": 0.2}, symptom_share=0.5))
    assert est.limit == "DRAM" and est.limit_busy_us == pytest.approx(300.0)
    assert est.ceiling_us == pytest.approx(300.0) and est.point_us == pytest.approx(300.0 / PRACTICAL)
    assert est.floor_us == pytest.approx(max(500.0, 300.0 / FLOOR_PACE))
    assert est.floor_x <= est.point_x <= est.ceiling_x
    # waste on a unit that does not limit the kernel saves nothing
    idle = estimate(u, 1000.0, Fix(kept={"FMA pipe": 0.0}, paced=False))
    assert idle.gain_pct == pytest.approx(0.0) and idle.limit == "L1/shared"


def test_a_fix_that_only_removes_work_keeps_the_kernels_pace():
    """A kernel at its L1 roof (90 %) whose fix removes half of L1's work runs twice as fast, not at 85 %."""
    u = Units(memory={"L1/shared": 90.0}, compute={"FMA pipe": 20.0})
    est = estimate(u, 1000.0, Fix(kept={"L1/shared": 0.5}, paced=False))
    assert est.point_us == pytest.approx(500.0) and est.point_x == pytest.approx(2.0)


def test_the_sm_follows_its_parts_and_whole_waves_bound_a_tail():
    u = Units(memory={"DRAM": 5.0}, compute={"SM": 80.0, "XU pipe": 80.0, "FMA pipe": 40.0})
    est = estimate(u, 100.0, Fix(kept={"XU pipe": 0.0}), issue_pct=50.0)
    assert est.limit == "issue slots" and est.limit_busy_us == pytest.approx(50.0)
    tail = estimate(u, 100.0, Fix(not_below_us=75.0, kept={}))
    assert tail.ceiling_us == pytest.approx(80.0) and tail.point_us == pytest.approx(80.0 / PRACTICAL)


def triton_fp32_matmul(counters: bool = True):
    """A Triton fp32 matmul with IEEE dots: the SIMT SGEMM fixture named matmul_kernel, its FMA pipe ~70 % busy,
    the tensor pipe idle, 805 blocks of 2 per SM on 132 SMs (6.1 waves); without counters it is a report
    recorded without FLOP counters or instruction statistics (a basic or detailed section set)."""
    sets = {"launch__grid_size": 805, "launch__waves_per_multiprocessor": 6.1, "sm__pipe_fma_cycles_active" + E: 70.0,
            "sm__inst_executed_pipe_fma" + E: 70.0, "sm__throughput" + E: 72.0, "sm__issue_active" + E: 72.0,
            "sm__inst_issued" + E: 72.0}
    drop = () if counters else FLOP_COUNTERS + INSTRUCTION_STATS
    return diagnose_profile(edited("no_tensor_cores", drop=drop, set_=sets, kernel="matmul_kernel"))


@pytest.mark.parametrize("counters", [True, False], ids=["with-flop-counters", "without"])
def test_a_triton_fp32_matmul_on_the_fma_pipe_is_no_tensor_cores_not_tail_effect(counters):
    report = triton_fp32_matmul(counters)
    top = report.findings[0]
    assert top.id == "no-tensor-cores", [(f.id, f.gain_pct) for f in report.findings]
    assert "name" in top.evidence["matrix_work_because"] and top.evidence["simt_pipe_pct"] == pytest.approx(70)
    # its speed of light is the tensor-core roof: several times faster, the ceiling at bf16 twice the TF32 point
    assert 5 <= top.evidence["kernel_speedup_est"] <= 12 and top.evidence["kernel_speedup_at_most"] > 15
    tail = next(f for f in report.findings if f.id == "tail-effect")
    idle = tail.evidence["idle_sm_time_pct"]
    assert idle == pytest.approx(100 * (1 - 6.1 / 7), abs=0.5)
    # the tail can give at most the idle part of its last wave
    assert tail.evidence["kernel_gain_pct"] <= idle + 0.1 and tail.gain_pct < top.gain_pct


def untiled_sgemm():
    """An 8192^3 fp32 GEMM without shared-memory tiling: the naive matmul fixture (one thread per output, 16 x 16
    blocks) scaled to 8192 (its counts x 64), reading DRAM 150 times its compulsory bytes at 86 % of DRAM peak,
    half of each load sector unused, the FMA pipe at what those FLOPs take in that time."""
    n = 8192
    dram = 150 * 3 * n * n * 4
    dur = dram / (0.86 * 3.35e12)
    flops = 2 * n ** 3
    fma = 100 * flops / (67e12 * dur)
    k = profile("v_matmul_naive", "csv").kernels[0]
    scaled = {m: v * 64 for m, v in k.metrics.items() if isinstance(v, (int, float)) and m.endswith(".sum")
              and m.startswith(("l1tex__t_", "smsp__", "sm__sass", "lts__t_", "sm__inst"))}
    sets = {**scaled, "gpu__time_duration.sum": dur, "launch__grid_dim_x": n // 16, "launch__grid_dim_y": n // 16,
            "launch__grid_size": (n // 16) ** 2, "launch__waves_per_multiprocessor": (n // 16) ** 2 / (132 * 8),
            "dram__bytes_read.sum": dram - n * n * 4, "dram__bytes_write.sum": n * n * 4,
            "lts__t_sectors_srcunit_tex_op_write.sum": n * n * 4 / 32, "lts__t_sector_op_read_hit_rate.pct": 55.0,
            "gpu__dram_throughput" + E: 86.0, "dram__throughput" + E: 86.0, "lts__throughput" + E: 88.0,
            "l1tex__throughput" + E: 60.0, "sm__pipe_fma_cycles_active" + E: fma, "sm__inst_executed_pipe_fma" + E: fma,
            "sm__throughput" + E: 45.0, "sm__issue_active" + E: 30.0, "sm__inst_issued" + E: 30.0,
            "sm__sass_thread_inst_executed_op_ffma_pred_on.sum": flops / 2}
    return diagnose_profile(edited("v_matmul_naive", drop=("memory_l2_theoretical_sectors_global",), set_=sets))


def test_reading_the_inputs_150_times_ranks_above_a_2x_sector_overfetch():
    report = untiled_sgemm()
    found = {f.id: f for f in report.findings}
    reuse = found.get("l2-miss") or found["poor-locality"]
    ev = reuse.evidence
    assert ev["dram_bytes"] / ev["compulsory_bytes_est"] == pytest.approx(150, rel=0.05)
    assert "one thread per output" in ev["compulsory_estimate"] and ev["limit_after_fix"] == "FMA pipe"
    coalesce = found["uncoalesced-access"]
    assert coalesce.evidence["kernel_speedup_at_most"] <= 2.0 < reuse.evidence["kernel_speedup_est"]
    assert ids(report).index(reuse.id) < ids(report).index("uncoalesced-access")
    # fp32 matrix work: on tensor cores its FLOPs and compulsory bytes take far less still
    assert ids(report)[0] == "no-tensor-cores" and found["no-tensor-cores"].evidence["kernel_speedup_est"] > 10


def test_a_gemv_far_below_its_dram_roof_is_memory_bound_before_its_partial_last_wave():
    """The warp-per-row GEMV fixture at 35 % of DRAM peak (its time 2.5x longer) with 858 blocks of 5 per SM on
    132 SMs (1.3 waves): more bytes in flight saves more than sizing the grid to whole waves."""
    k = profile("v_gemv", "csv").kernels[0]
    report = diagnose_profile(edited("v_gemv", set_={
        "launch__grid_size": 858, "launch__grid_dim_x": 858, "launch__waves_per_multiprocessor": 1.3,
        "gpu__compute_memory_throughput" + E: 35.0, "gpu__dram_throughput" + E: 35.0, "dram__throughput" + E: 35.0,
        "lts__throughput" + E: 34.0, "gpu__time_duration.sum": k.duration_s * 87.6 / 35.0}))
    assert ids(report)[:2] == ["memory-bound", "tail-effect"], [(f.id, f.gain_pct) for f in report.findings]
    assert "no-tensor-cores" not in ids(report) and "l2-miss" not in ids(report)   # a GEMV reads each input once
    mem, tail = report.findings[:2]
    assert mem.evidence["limit_after_fix"] == "DRAM" and mem.evidence["kernel_speedup_est"] == pytest.approx(
        0.85 / 0.35, rel=0.02)
    assert tail.evidence["kernel_speedup_at_most"] <= 1 / (1 - tail.evidence["idle_sm_time_pct"] / 100) + 0.01


def test_a_small_last_wave_on_a_kernel_otherwise_at_its_roof_costs_its_idle_part():
    """fma_throughput at 4.05 waves, its FMA pipe 90 % busy in the full waves (73 % over the whole kernel)."""
    w = 4.05
    busy = 90 * w / 5
    report = diagnose_profile(edited("fma_throughput", set_={
        "launch__waves_per_multiprocessor": w, "launch__grid_size": round(w * 132 * 8),
        "sm__pipe_fma_cycles_active" + E: busy, "sm__inst_executed_pipe_fma" + E: busy, "sm__throughput" + E: busy,
        "sm__issue_active" + E: busy * 0.6, "sm__inst_issued" + E: busy * 0.6}))
    top = report.findings[0]
    assert top.id == "tail-effect" and top.evidence["idle_sm_time_pct"] == pytest.approx(19, abs=0.5)
    assert top.evidence["kernel_gain_pct"] <= top.evidence["idle_sm_time_pct"]
    assert top.evidence["kernel_speedup_at_most"] == pytest.approx(5 / w, abs=0.01)


REPORTS = sorted(DATA.glob("*.csv")) + sorted(ROOT.glob("src/perflab/catalog/*/artifacts/*.csv.gz"))
REAL_REPORTS = sorted(REAL.glob("*.ncu-rep")) if REAL.is_dir() and has_ncu_report() else []


@pytest.mark.parametrize("path", REPORTS + REAL_REPORTS, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_every_kernel_finding_states_its_range_and_a_point_inside_it(path):
    report = diagnose_ncu(path)
    for f in report.findings:
        ev = f.evidence
        if "kernel_speedup_est" not in ev:
            assert f.severity == "info" or ev.get("unjudged"), (f.id, f.summary)
            continue
        lo, hi = ev["kernel_speedup_range"]
        assert 1.0 <= lo <= ev["kernel_speedup_est"] <= hi, (f.id, ev["kernel_speedup_range"])
        assert ev["kernel_gain_pct"] == pytest.approx(100 * (1 - 1 / ev["kernel_speedup_est"]), abs=0.6)
        assert f.gain_pct == pytest.approx(ev["kernel_gain_pct"] * ev["kernel_time_share_pct"] / 100, abs=0.2)


def test_a_kernel_the_trace_ties_to_a_matrix_op_is_matrix_work_whatever_its_name():
    """The SIMT SGEMM renamed `k0`, recorded without FLOP counters or instruction statistics: nothing in the
    report says matrix product; the op that launched it (aten::addmm, from the trace) does."""
    profile_ = edited("no_tensor_cores", drop=FLOP_COUNTERS + INSTRUCTION_STATS, kernel="k0")
    assert "no-tensor-cores" not in ids(diagnose_profile(profile_))
    tied = diagnose_profile(profile_, ops={"k0": ["aten::addmm"]})
    top = tied.findings[0]
    assert top.id == "no-tensor-cores" and top.evidence["matrix_work_because"] == ["op"]
    assert "busy time x its peak" in top.evidence["matrix_flops_from"]


def test_fp64_matrix_work_moves_to_the_fp64_tensor_cores():
    """The SGEMM's FMA work as DFMA on the FP64 pipe (60 % busy): its speed of light is the FP64 tensor roof
    (twice the FP64 SIMT rate on an H100), not TF32."""
    k = profile("no_tensor_cores", "csv").kernels[0]
    ffma = k.get("sm__sass_thread_inst_executed_op_ffma_pred_on.sum")
    report = diagnose_profile(edited("no_tensor_cores", set_={
        "sm__sass_thread_inst_executed_op_ffma_pred_on.sum": 0.0, "sm__sass_thread_inst_executed_op_dfma_pred_on.sum": ffma,
        "sm__pipe_fma_cycles_active" + E: 2.0, "sm__inst_executed_pipe_fma" + E: 2.0,
        "sm__pipe_fp64_cycles_active" + E: 60.0, "sm__inst_executed_pipe_fp64" + E: 60.0}, kernel="dgemm_simt"))
    top = report.findings[0]
    assert top.id == "no-tensor-cores" and top.evidence["simt_pipe"] == "FP64 pipe"
    assert top.evidence["tensor_roof_tflops"] == pytest.approx(67.0) and "fp64_tflops" in top.evidence
    assert "FP64 tensor cores" in top.fix
