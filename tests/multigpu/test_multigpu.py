"""Multi-rank analyses (analysis.multigpu.collectives), the multi-GPU rules, and HTA agreement.

Synthetic per-rank traces plant one cause each; the HTA sample traces (real multi-rank jobs) check
sizes/bandwidths and the comm/comp overlap against numbers HTA 0.5.0 itself computed
(tests/data/kineto/hta_comm_expected.json, written by scripts/record.py hta-overlap).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from perflab.analysis.multigpu import collectives as C
from perflab.doctor import diagnose
from perflab.trace import kineto
from perflab.trace.builders import synthetic

PEER = Path(os.environ.get("PERFLAB_PEER_TRACES", Path(__file__).resolve().parents[3] / "shared" / "peer-traces" / "hta"))
HTA = json.loads((Path(__file__).parents[1] / "data" / "kineto" / "hta_comm_expected.json").read_text())
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
AR = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
need_peer = pytest.mark.skipif(not PEER.is_dir(), reason="peer traces not available")


def _rank(rank: int, world: int, *, steps: int = 3, layers: int = 20, gemm_us: float = 300.0, comm_us: float = 800.0,
          wait_us: float = 0.0, host_us: float = 0.0, overlap: bool = False, nelems: int = 64 << 20):
    """One rank of a data-parallel step: compute, then an all-reduce of bf16 gradients on stream 20.

    wait_us: this rank's kernel also waits for a late rank; host_us: host work before the all-reduce."""
    b = synthetic.TraceBuilder(rank=rank, world_size=world)
    args = {"Collective name": "allreduce", "In msg nelems": nelems, "Out msg nelems": nelems, "Group size": world,
            "dtype": "BFloat16", "Process Group Ranks": str(list(range(world)))}
    for n in range(steps):
        with b.step(n):
            for i in range(layers):
                b.op("aten::mm", [(GEMM, gemm_us, (132, 1, 1), (384, 1, 1))], cpu_us=12.0)
                if overlap and i == layers // 2:
                    with b.span("record_param_comms", **args) as ev:
                        b.gpu_op("kernel", AR, comm_us + wait_us, 20, "cudaLaunchKernel", 5.0,
                                 ev["args"]["External id"], **args)
            if host_us:
                b.host("aten::cat", host_us)
            if not overlap:
                b.wait_stream(20, 7)
                with b.span("record_param_comms", **args) as ev:
                    b.gpu_op("kernel", AR, comm_us + wait_us, 20, "cudaLaunchKernel", 5.0,
                             ev["args"]["External id"], **args)
                b.wait_stream(7, 20)
            b.synchronize()
    return b


def _folder(tmp_path, builders):
    folder = tmp_path / "ranks"
    folder.mkdir(parents=True)
    for b in builders:
        b.write(folder / f"rank{b.rank}.trace.json.gz")
    return folder


# -- formulas -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind, n, factor", [("all_reduce", 2, 1.0), ("all_reduce", 8, 1.75), ("all_gather", 4, 0.75),
                                             ("reduce_scatter", 8, 0.875), ("broadcast", 8, 1.0), ("all_to_all", 2, 0.5)])
def test_bus_factor_follows_nccl_tests(kind, n, factor):
    assert C.bus_factor(kind, n) == pytest.approx(factor)


@pytest.mark.parametrize("name, kind", [
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "all_reduce"),
    ("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "all_gather"),
    ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", "reduce_scatter"), ("_reduce_scatter_base", "reduce_scatter"),
    ("allgather_into_tensor_coalesced", "all_gather"), ("ncclDevKernel_SendRecv", "send_recv"),
    ("broadcast", "broadcast"), ("all_to_allv", "all_to_all"), ("ncclDevKernel_Reduce_Sum_f32", "reduce")])
def test_collective_kind(name, kind):
    assert C.collective_kind(name.replace("ncclDevKernel_", "").replace("ncclKernel_", "")) == kind


def test_message_bytes_uses_the_full_buffer_for_gathers():
    assert C.message_bytes("all_reduce", 1000, 1000, "BFloat16", 2) == 2000
    assert C.message_bytes("all_gather", 1000, 4000, "Float", 4) == 16000   # the gathered output
    assert C.message_bytes("reduce_scatter", 4000, 1000, "float", 4) == 16000  # the full input
    assert C.message_bytes("all_reduce", 10, 10, "NoSuchType", 2) is None


# -- one rank, several ranks --------------------------------------------------------------------------------
def test_sizes_and_bandwidth_from_the_kernel_args(tmp_path):
    trace = kineto.load(_rank(0, 2, comm_us=800.0, nelems=64 << 20).write(tmp_path / "r0.json.gz"))
    colls = C.collectives(trace)
    assert len(colls) == 3 and {c["kind"] for c in colls} == {"all_reduce"}
    c = colls[0]
    assert c["bytes"] == (64 << 20) * 2 and c["group_size"] == 2 and c["args_from"] == "kernel"
    assert c["algbw_gbps"] == pytest.approx(c["bytes"] / 800e3, rel=1e-3)
    assert c["busbw_gbps"] == pytest.approx(c["algbw_gbps"] * 2 * (2 - 1) / 2, rel=1e-6)


def test_sizes_from_the_enclosing_host_op_when_the_kernel_has_none(tmp_path):
    b = synthetic.TraceBuilder(rank=0, world_size=4)
    with b.step(0):
        b.op("aten::mm", [(GEMM, 300.0)])
        with b.span("record_param_comms", **{"Collective name": "_allgather_base", "In msg nelems": 1000,
                                             "Out msg nelems": 4000, "Group size": 4, "dtype": "Float"}) as ev:
            b.gpu_op("kernel", "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", 50.0, 20,
                     "cudaLaunchKernel", 5.0, ev["args"]["External id"])
        b.synchronize()
    (c,) = C.collectives(kineto.load(b.write(tmp_path / "t.json")))
    assert (c["kind"], c["bytes"], c["group_size"], c["args_from"]) == ("all_gather", 16000.0, 4, "record_param_comms")
    assert c["busbw_gbps"] == pytest.approx(16000 / 50e3 * 3 / 4)


def test_straggler_waits_are_the_extra_kernel_time_of_early_ranks(tmp_path):
    folder = _folder(tmp_path, [_rank(0, 2, wait_us=5000.0), _rank(1, 2, host_us=5000.0)])
    traces = kineto.load_ranks(folder)
    s = C.multirank_summary(traces)
    assert s["straggler"] == 1 and s["collectives"]["matched_across_ranks"] == 3
    r0, r1 = s["per_rank"]
    assert r0["wait_ms"] == pytest.approx(5.0, rel=1e-3) and r1["wait_ms"] == pytest.approx(0.0, abs=1e-6)
    # the transfer is the late rank's kernel: bandwidth from it, not from the waiting rank's long kernel
    ar = s["collectives"]["by_kind"]["all_reduce"]
    assert ar["busbw_gbps"] == pytest.approx((64 << 20) * 2 / 800e3, rel=1e-3)


def test_doctor_on_a_straggler_names_load_imbalance_not_communication(tmp_path):
    folder = _folder(tmp_path, [_rank(0, 2, wait_us=5000.0), _rank(1, 2, host_us=5000.0)])
    rep = diagnose(folder)
    assert rep.top.id == "load-imbalance", [(f.id, f.gain_pct) for f in rep.findings]
    ev = rep.top.evidence
    assert ev["straggler_rank"] == 1 and ev["waiting_rank"] == 0 and rep.top.gain_pct > 25
    assert "comm-not-overlapped" not in [f.id for f in rep.findings if f.severity in ("high", "medium")]
    multi = rep.to_dict()["analyses"]["multigpu"]
    assert [r["rank"] for r in multi["per_rank"]] == [0, 1]
    assert multi["per_rank"][0]["wait_ms"] == pytest.approx(5.0, rel=1e-3)


def test_doctor_on_exposed_allreduce_names_comm_not_overlapped_and_not_imbalance(tmp_path):
    folder = _folder(tmp_path, [_rank(r, 2, comm_us=2500.0) for r in (0, 1)])
    rep = diagnose(folder)
    assert rep.top.id == "comm-not-overlapped", [(f.id, f.gain_pct) for f in rep.findings]
    assert "load-imbalance" not in rep.ids()
    assert rep.top.evidence["dominant_collective"] == "all_reduce" and rep.top.gain_pct > 25
    fixed = diagnose(_folder(tmp_path / "fixed", [_rank(r, 2, comm_us=2500.0, overlap=True) for r in (0, 1)]))
    assert "comm-not-overlapped" not in fixed.ids()


def test_terminal_report_shows_per_rank_rows(tmp_path):
    from rich.console import Console

    from perflab.report.terminal import render_report

    rep = diagnose(_folder(tmp_path, [_rank(0, 2, wait_us=5000.0), _rank(1, 2, host_us=5000.0)]))
    console = Console(record=True, width=160)
    render_report(rep, console)
    text = console.export_text()
    assert "ranks (world size 2" in text and "last to arrive at collectives: rank 1" in text


# -- real multi-rank traces (HTA samples) ----------------------------------------------------------------
@need_peer
@pytest.mark.parametrize("case", sorted(HTA["cases"]))
def test_comm_comp_overlap_agrees_with_hta(case):
    files = HTA["cases"][case]["files"]
    got = {r["rank"]: r["overlap_pct"] for r in C.hta_comm_comp_overlap([kineto.load(PEER / f) for f in files])}
    for row in HTA["cases"][case]["overlap"]:
        assert got[row["rank"]] == pytest.approx(row["comp_comm_overlap_pctg"], abs=0.01)


@need_peer
def test_nccl_sample_sizes_and_bus_bandwidth():
    trace = kineto.load(PEER / "nccl_parser_config__nccl_data.json.gz")
    colls = C.collectives(trace)
    kinds = {c["kind"] for c in colls}
    assert kinds == {"all_reduce", "broadcast"} and all(c["bytes"] for c in colls)
    first = min((c for c in colls if c["kind"] == "all_reduce"), key=lambda c: c["ts"])
    assert first["bytes"] == first["bytes"] // 4 * 4 and first["group_size"] == 2


@need_peer
@pytest.mark.parametrize("workers", ["1", "2"])
def test_collective_args_come_from_the_one_read(monkeypatch, workers):
    """The reader gathers the collectives' args as it decodes (both readers): no second pass over the file."""
    from perflab.trace.torch_profiler import comm_args, kineto_parallel

    path = PEER / "nccl_parser_config__nccl_data.json.gz"
    expected = comm_args.read_comm_records(str(path))
    monkeypatch.setenv("PERFLAB_READER_PROCESSES", workers)
    monkeypatch.setattr(kineto_parallel, "PARALLEL_MIN_BYTES", 0)  # a small file through the parallel reader too
    monkeypatch.setattr(comm_args, "read_comm_records", lambda p: pytest.fail("the file was read again"))
    trace = kineto.load(path)
    assert trace.cache["comm_records"] == expected and len(expected) > 0
    assert {c["kind"] for c in C.collectives(trace)} == {"all_reduce", "broadcast"}


@need_peer
def test_two_sampled_ranks_of_a_128_rank_job(tmp_path):
    folder = tmp_path / "tf"
    folder.mkdir()
    for f in PEER.glob("trace_filter__sampled_rank-*"):
        (folder / f.name).symlink_to(f)
    traces = kineto.load_ranks(folder)
    s = C.multirank_summary(traces)
    assert s["ranks"] == [0, 1] and s["world_size"] == 128
    assert s["collectives"]["matched_across_ranks"] == 10  # 5 per step, 2 steps, paired by step and order
    ar = s["collectives"]["by_kind"]["all_reduce"]
    assert ar["sized"] == ar["count"] and ar["group_size"] == 128  # sizes from the nccl:all_reduce ranges
    rep = diagnose(folder)
    assert {"comm-not-overlapped", "load-imbalance"} <= set(rep.ids())


# -- 2x H200 recordings (tests/data/multigpu/h200x2, scripts/record.py multigpu) -------------------------------
H200 = Path(__file__).parents[1] / "data" / "multigpu" / "h200x2"
MODEL_BYTES = 8 * (4096 * 4096 + 4096) * 2  # --layers 8 --hidden 4096, bf16 weights and biases: the gradients


def _h200(name):
    return kineto.load_ranks(H200 / name)


def test_h200_straggler_is_named_with_the_planted_rank_and_wait():
    rep = diagnose(H200 / "straggler")
    assert rep.source["ranks"] == [0, 1] and rep.source["device"] == "NVIDIA H200"
    assert rep.top.id == "load-imbalance", [(f.id, f.gain_pct) for f in rep.findings]
    ev = rep.top.evidence
    assert ev["straggler_rank"] == 1 and ev["waiting_rank"] == 0  # --straggle-ms 5 ran on the last rank
    assert 5.0 <= ev["wait_ms_per_step"][0] < 8.0 and ev["wait_ms_per_step"][1] < 0.1
    assert ev["exposed_wait_ms_per_step"][0] > 3.0
    assert rep.to_dict()["analyses"]["multigpu"]["last_to_arrive_counts"]["1"] >= 16  # JSON keys


def test_h200_gradient_bytes_per_step_match_the_model():
    for name, per_step in (("exposed", 1), ("ddp", 8)):  # one flat all-reduce vs DDP's 8 buckets (25 MB cap)
        for t in _h200(name):
            colls = [c for c in C.collectives(t) if c["step"] is not None]
            steps = {c["step"] for c in colls}
            assert len(colls) == per_step * len(steps) and {c["kind"] for c in colls} == {"all_reduce"}
            for s in steps:
                assert sum(c["bytes"] for c in colls if c["step"] == s) == MODEL_BYTES
            assert all(c["args_from"] == "kernel" and c["group_size"] == 2 for c in colls)


def test_h200_sync_allreduce_is_not_overlapped_and_ddp_is():
    exposed = C.multirank_summary(_h200("exposed"))
    ddp = C.multirank_summary(_h200("ddp"))
    assert all(r["comm_overlap_pct"] < 1.0 for r in exposed["per_rank"])
    assert all(r["comm_overlap_pct"] > 10.0 for r in ddp["per_rank"])
    assert "comm-not-overlapped" in diagnose(H200 / "exposed").ids()


def test_h200_trace_bus_bandwidth_agrees_with_the_allreduce_bench():
    bench = json.loads((H200 / "allreduce.json").read_text())
    assert bench["manifest"]["gpu"] == "NVIDIA H200" and bench["world_size"] == 2
    at_256mib = next(r for r in bench["rows"] if r["bytes"] == 256 << 20)
    s = C.multirank_summary(_h200("exposed"))  # 256 MiB bf16 all-reduces, timed on the last-arriving rank
    traced = s["collectives"]["by_kind"]["all_reduce"]["busbw_gbps"]
    assert traced == pytest.approx(at_256mib["busbw_gbps"], rel=0.15)
