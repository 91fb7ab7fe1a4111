"""comm-below-roof: collectives against the interconnect's busbw curve for their kind and size.

Synthetic per-rank traces plant one cause each (a slow link, a late rank, many small messages, a slow
but hidden collective); the recorded 2-H200 traces (tests/data/multigpu/h200x2, with the all-reduce sweep
measured on the same machine) and the 8-rank V100 DLRM trace check that it does not fire on real jobs
whose evidence says their collectives run at the roof (or cannot be judged).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from perflab.analysis.multigpu import comm_roof as R
from perflab.analysis.work.saved_ceilings import saved_sweeps, sweeps_of
from perflab.doctor import diagnose
from perflab.trace.builders import synthetic

H100 = synthetic.H100
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
AR = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
H200 = Path(__file__).parents[1] / "data" / "multigpu" / "h200x2"
DLRM = Path(__file__).resolve().parents[3] / "shared" / "real-traces" / "param_dlrm_v100_8rank"
# a made-up 2-GPU curve for the synthetic H100 (busbw GB/s at each size): latency-bound below 1 MB
CURVE = [(1 << 10, 0.05), (1 << 14, 0.8), (1 << 20, 40.0), (1 << 24, 200.0), (1 << 28, 300.0)]


def _sweep(folder: Path, kind: str = "all_reduce", gpu: str = H100, world: int = 2) -> Path:
    doc = {"schema": "perflab.collectives/1", "manifest": {"gpu": gpu, "date": "2026-11-30T00:00:00"},
           "world_size": world,
           "sweeps": {kind: {"world_size": world, "rows": [{"bytes": b, "busbw_gbps": bw} for b, bw in CURVE]}}}
    path = folder / "collectives.json"
    path.write_text(json.dumps(doc))
    return path


def _rank(rank: int, *, comm: list[tuple[int, float]], steps: int = 3, gemm_us: float = 2000.0,
          wait_us: float = 0.0, overlap: bool = False, world: int = 2):
    """A data-parallel step: compute, then (or, overlap=True: under the compute) the all-reduces in `comm`,
    (nelems bf16, transfer µs) each; wait_us: this rank's kernels also wait for a late rank."""
    b = synthetic.TraceBuilder(rank=rank, world_size=world)
    for n in range(steps):
        with b.step(n):
            b.op("aten::mm", [(GEMM, gemm_us, (132, 1, 1), (384, 1, 1))], cpu_us=12.0)
            if not overlap:
                b.wait_stream(20, 7)
            else:
                b.now -= gemm_us * 0.9  # the host launches the collectives while the GEMM runs
            for nelems, us in comm:
                args = {"Collective name": "allreduce", "In msg nelems": nelems, "Out msg nelems": nelems,
                        "Group size": world, "dtype": "BFloat16", "Process Group Ranks": str(list(range(world)))}
                with b.span("record_param_comms", **args) as ev:
                    b.gpu_op("kernel", AR, us + wait_us, 20, "cudaLaunchKernel", 5.0, ev["args"]["External id"], **args)
            b.wait_stream(7, 20)
            b.synchronize()
    return b


def _folder(tmp_path: Path, builders, sweep: bool = True) -> Path:
    root = tmp_path / "rec"
    folder = root / "ranks"
    folder.mkdir(parents=True)
    for b in builders:
        b.write(folder / f"rank{b.rank}.trace.json.gz")
    if sweep:
        _sweep(root)  # the recording's folder, one above the traces
    return folder


BIG = 32 << 20  # 64 MiB of bf16: the curve says ~230 GB/s busbw, i.e. ~290 µs for 2 ranks


def _finding(rep, fid="comm-below-roof"):
    return next((f for f in rep.findings if f.id == fid), None)


def test_curve_interpolates_in_log_size_and_keeps_latency_below_the_sweep():
    roof = R.comm_roof(H100, 2, sweeps_of(json.loads(json.dumps(
        {"schema": "perflab.allreduce/1", "manifest": {"gpu": H100, "date": "x"}, "world_size": 2,
         "rows": [{"bytes": b, "busbw_gbps": bw} for b, bw in CURVE]}))), None)
    assert roof.busbw_at("all_reduce", 1 << 20, 1.0)[0] == pytest.approx(40.0)
    assert roof.busbw_at("all_reduce", 1 << 22, 1.0)[0] == pytest.approx(120.0)  # halfway in log2
    assert roof.busbw_at("all_reduce", 512, 1.0)[0] == pytest.approx(0.025)    # same time as 1 KiB
    assert roof.busbw_at("all_reduce", 1 << 30, 1.0)[0] == pytest.approx(300.0)
    bw, label = roof.busbw_at("all_gather", 1 << 28, 0.5)
    assert bw == pytest.approx(300.0) and "no all_gather sweep" in label
    assert R.comm_roof("NVIDIA A100-SXM4-80GB", 2, roof_sweeps := sweeps_of(
        {"schema": "perflab.allreduce/1", "manifest": {"gpu": H100}, "world_size": 2,
         "rows": [{"bytes": 1024, "busbw_gbps": 1.0}]}), None).curves == {} and roof_sweeps  # another GPU's sweep


def test_slow_link_fires_with_bytes_busbw_ceiling_and_source(tmp_path):
    slow = 64 << 20  # bytes
    ranks = [_rank(r, comm=[(BIG, 2000.0)]) for r in (0, 1)]  # 64 MiB in 2 ms: ~34 GB/s busbw, roof ~230
    rep = diagnose(_folder(tmp_path, ranks))
    f = _finding(rep)
    assert f is not None, rep.ids()
    g = f.evidence["groups"][0]
    assert g["kind"] == "all_reduce" and g["bytes"] == slow and g["count"] == 3 and g["ranks"] == 2
    assert g["busbw_gbps"] == pytest.approx(slow / 2000.0 / 1e3, rel=0.01)
    assert 200 < g["roof_busbw_gbps"] < 260 and g["pct_of_roof"] < 20
    assert "measured all_reduce sweep on 2 x" in f.evidence["ceiling_source"] and "collectives.json" in g["roof"]
    assert g["time_from"] == "last-arriving rank"
    # the gain is the exposed gap: (2000 - time at roof) per step of a ~4.1 ms step
    at_roof = slow / (g["roof_busbw_gbps"] * 1e3)
    assert f.evidence["exposed_gap_ms_per_step"] == pytest.approx((2000.0 - at_roof) / 1e3, rel=0.02)
    assert 30 < f.gain_pct < 55


def test_at_the_curve_it_does_not_fire(tmp_path):
    ranks = [_rank(r, comm=[(BIG, 300.0)]) for r in (0, 1)]
    assert _finding(diagnose(_folder(tmp_path, ranks))) is None


def test_waiting_for_a_late_rank_is_not_a_slow_link(tmp_path):
    # rank 0's kernels wait 3 ms for rank 1 each step; the transfer itself (rank 1's kernel) is at the roof
    ranks = [_rank(0, comm=[(BIG, 300.0)], wait_us=3000.0), _rank(1, comm=[(BIG, 300.0)])]
    rep = diagnose(_folder(tmp_path, ranks), rank=0)
    assert _finding(rep) is None and "load-imbalance" in rep.ids(), rep.ids()


def test_one_rank_alone_is_judged_by_its_fastest_call(tmp_path):
    b = _rank(0, comm=[(BIG, 300.0)], steps=4)
    folder = _folder(tmp_path, [b])
    assert _finding(diagnose(folder)) is None
    slow = _folder(tmp_path / "slow", [_rank(0, comm=[(BIG, 2500.0)], steps=4)])
    f = _finding(diagnose(slow))
    assert f is not None and f.evidence["groups"][0]["time_from"] == "fastest call of its size on this rank"


def test_slow_but_hidden_behind_compute_costs_nothing(tmp_path):
    ranks = [_rank(r, comm=[(BIG, 1500.0)], gemm_us=4000.0, overlap=True) for r in (0, 1)]
    assert _finding(diagnose(_folder(tmp_path, ranks))) is None


def test_datasheet_rate_judges_only_long_messages_and_says_so(tmp_path):
    slow = [_rank(r, comm=[(BIG, 2000.0)]) for r in (0, 1)]
    f = _finding(diagnose(_folder(tmp_path / "a", slow, sweep=False)))
    assert f is not None and f.evidence["groups"][0]["roof_busbw_gbps"] == 450.0
    assert f.evidence["groups"][0]["roof"].startswith("datasheet H100 SXM link 450 GB/s")
    small = [_rank(r, comm=[(4096, 200.0)] * 3) for r in (0, 1)]  # 8 KB at the datasheet rate: ~0.02 µs
    rep = diagnose(_folder(tmp_path / "b", small, sweep=False))
    assert _finding(rep) is None


def test_many_latency_bound_messages_point_at_bucketing(tmp_path):
    # 40 all-reduces of 32 KB per step, each at the curve for its size (~7 GB/s, ~4.5 µs): latency-bound;
    # their 1.3 MB in one message would take ~25 µs, the 40 calls ~180 µs
    per = 16 << 10
    at_curve = 2 * per / (float(np.interp(np.log2(2 * per), np.log2([c[0] for c in CURVE]),
                                          [c[1] for c in CURVE])) * 1e3)
    ranks = [_rank(r, comm=[(per, at_curve)] * 40, gemm_us=300.0) for r in (0, 1)]
    f = _finding(diagnose(_folder(tmp_path, ranks)))
    assert f is not None, "latency-bound messages"
    small = f.evidence["small_messages"]
    assert small["messages_per_step"] == 40 and small["kind"] == "all_reduce"
    assert small["bucketed_us"] < 0.2 * small["time_us"]
    assert "bucket" in f.fix and all(not g["pct_of_roof"] < 50 for g in f.evidence["groups"])
    one = [_rank(r, comm=[(per * 40, 40 * at_curve * 0.05)], gemm_us=300.0) for r in (0, 1)]  # bucketed
    assert _finding(diagnose(_folder(tmp_path / "one", one))) is None


def test_saved_sweeps_are_found_beside_the_trace_and_in_the_user_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFLAB_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    (tmp_path / "rec" / "ranks").mkdir(parents=True)
    _sweep(tmp_path / "rec")
    (tmp_path / "home" / "allreduce.json").write_text(json.dumps(
        {"schema": "perflab.allreduce/1", "manifest": {"gpu": "X"}, "world_size": 4,
         "rows": [{"bytes": 1024, "busbw_gbps": 1.0}]}))
    (tmp_path / "home" / "ceilings.json").write_text("{broken")
    found = saved_sweeps(str(tmp_path / "rec" / "ranks" / "rank0.trace.json.gz"))
    assert [(s["kind"], s["world_size"], s["gpu"]) for s in found] == [("all_reduce", 2, H100), ("all_reduce", 4, "X")]


def test_recorded_h200_jobs_run_at_the_measured_curve():
    """2 x H200: the flat 256 MiB all-reduce and DDP's 33.6 MB buckets move at 91-101 % of the all-reduce
    sweep measured on the same machine (allreduce.json beside the traces): no comm-below-roof."""
    from perflab.doctor.context import Context
    from perflab.doctor.rules.interconnect import comm_judgement
    from perflab.trace.kineto import load_ranks

    for name in ("exposed", "ddp", "straggler"):
        ranks = load_ranks(H200 / name)
        j = comm_judgement(Context.build(ranks[0], None, ranks))
        assert "measured all_reduce sweep on 2 x NVIDIA H200" in j["source"]
        (g,) = j["groups"]
        assert g["judged_by"] == "last-arriving rank" and 85.0 < g["pct_of_roof"] < 110.0, (name, g)
        assert "comm-below-roof" not in diagnose(H200 / name).ids()


@pytest.mark.skipif(not DLRM.is_dir(), reason="real traces not available")
def test_dlrm_v100_messages_are_too_small_for_the_datasheet_alone():
    """8 x V100 DLRM: 1.5 MB all-reduces and KB all-to-alls would take under 100 µs at the datasheet's 150 GB/s,
    where NCCL's latency weighs: without a measured curve they are not judged, and it says so."""
    from perflab.doctor.context import Context
    from perflab.doctor.rules.interconnect import comm_judgement
    from perflab.trace.kineto import load_ranks

    ranks = load_ranks(DLRM)
    j = comm_judgement(Context.build(ranks[0], None, ranks))
    assert j["groups"] == [] and sum(j["unjudged"].values()) == j["count"]
    assert "datasheet V100 SXM2" in j["source"]
    assert "comm-below-roof" not in diagnose(DLRM).ids()
