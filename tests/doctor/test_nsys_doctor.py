"""The doctor, stats, sql and diff on small Nsight Systems exports of plain CUDA programs (no PyTorch)."""
from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import numpy as np
import pytest

from nsys_exports import ExportBuilder
from perflab.__main__ import main
from perflab.doctor import diagnose
from perflab.errors import PerflabError


def _ids(report) -> dict[str, str]:
    return {f.id: f.severity for f in report.findings}


def test_a_synchronize_after_every_kernel_is_host_sync(tmp_path):
    b = ExportBuilder()
    for _ in range(200):
        b.kernel("solve_kernel(int, float*)", 20_000)
        b.synchronize("cudaDeviceSynchronize_v3020", 4)
        b.host(60_000)  # the host decides what to launch next only once the result is back
    report = diagnose(b.write(tmp_path / "s.sqlite"))
    assert report.findings[0].id == "host-sync" and report.findings[0].severity == "high"
    assert report.analyses["summary"]["syncs"]["names"] == {"cudaDeviceSynchronize": 200}
    assert report.source["kind"] == "nsys"
    # a CUDA program, not PyTorch: the fix speaks its API
    assert "cudaStreamWaitEvent" in report.findings[0].fix and ".item()" not in report.findings[0].fix


def test_many_tiny_kernels_launched_back_to_back_are_launch_overhead(tmp_path):
    b = ExportBuilder(launch_ns=6_000, latency_ns=2_000)
    for i in range(3000):
        b.kernel(f"tiny_elementwise_{i % 7}", 1_500)
    top = diagnose(b.write(tmp_path / "l.sqlite")).findings[0]
    assert top.id == "launch-overhead" and top.severity == "high", top


def test_pageable_blocking_copies_are_named(tmp_path):
    b = ExportBuilder()
    for _ in range(20):
        b.memcpy("HtoD", "pageable", "device", 64 << 20, 12_000_000)  # 64 MB at ~5.6 GB/s: staged
        for _ in range(5):
            b.kernel("compute", 400_000, grid=(1024, 1, 1))
        b.memcpy("DtoH", "device", "pageable", 8 << 20, 1_500_000)
    report = diagnose(b.write(tmp_path / "c.sqlite"))
    ids = _ids(report)
    assert ids.get("pageable-memcpy") == "high" and "no-overlap" in ids
    copies = report.analyses["copies"]
    assert copies["h2d"]["count"] == 20 and copies["h2d"]["bytes"] == 20 * (64 << 20)
    assert copies["h2d"]["gbps"] == pytest.approx((64 << 20) / 12_000_000, rel=1e-6)


def test_nccl_kernels_with_nothing_beside_them_are_exposed_communication(tmp_path, monkeypatch):
    import perflab.trace.torch_profiler.comm_args as comm_args

    def no_json_reread(path):  # Kineto keeps collective args in its JSON; an export must not be read as one
        raise AssertionError(f"{path} re-read as a Kineto trace")

    monkeypatch.setattr(comm_args, "read_comm_records", no_json_reread)
    b = ExportBuilder()
    # the all-reduce runs after the GEMM, nothing beside it: hidden behind the GEMM the step would be its 900 us
    # instead of 1,200 (launched together, it already ran beside the GEMM and no overlap could shorten the step)
    for _ in range(50):
        b.kernel("ampere_sgemm_128x64_tn", 300_000, grid=(512, 1, 1))
        b.synchronize("cudaStreamSynchronize_v3020", 2)
        b.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 900_000, stream=13)
        b.synchronize("cudaStreamSynchronize_v3020", 2)
    ids = _ids(diagnose(b.write(tmp_path / "n.sqlite")))
    assert "comm-not-overlapped" in ids, ids


def test_hiding_a_collective_gives_back_no_more_than_its_own_transfer_leaves(tmp_path):
    """The gain of overlap is bounded by its ceiling: hidden behind the compute, the transfer still takes its time.
    An all-reduce on its own stream that is the longer lane (900 us beside a 300 us GEMM) is exposed for 600 us of
    each step, but no overlap can make the step shorter than the all-reduce itself."""
    from perflab.analysis.work.estimate import speedup_of_gain

    b = ExportBuilder()
    for _ in range(50):
        b.kernel("ampere_sgemm_128x64_tn", 300_000, grid=(512, 1, 1))
        b.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 900_000, stream=13)
        b.synchronize("cudaStreamSynchronize_v3020", 2)
    for f in diagnose(b.write(tmp_path / "n.sqlite")).findings:
        if f.id == "comm-not-overlapped":
            assert f.evidence["exposed_transfer_pct"] > 50
            assert speedup_of_gain(f.gain_pct) <= f.evidence["speedup_at_most"] * 1.01, (f.gain_pct, f.evidence)


def test_small_independent_kernels_one_at_a_time_are_serialized(tmp_path):
    b = ExportBuilder(sms=132)
    for _ in range(40):
        for head in range(16):
            b.kernel(f"attention_head_kernel<{head}>", 80_000, grid=(8, 1, 1), block=(256, 1, 1))
    ids = _ids(diagnose(b.write(tmp_path / "k.sqlite")))
    assert "serialized-kernels" in ids, ids


def test_allocator_calls_are_in_the_model_with_their_names(tmp_path):
    from perflab.trace import nsys
    from perflab.trace.model import RUNTIME

    b = ExportBuilder()
    for _ in range(10):
        b.api("cudaMalloc_v3020", 300_000)
        b.kernel("k", 50_000)
        b.api("cudaFree_v3020", 200_000)
        b.api("cuMemAlloc_v2", 100_000)
    t = nsys.load(b.write(tmp_path / "a.sqlite"))
    names = {t.name_of(r) for r in np.flatnonzero(t.kind == RUNTIME)}
    assert {"cudaMalloc", "cudaFree", "cuMemAlloc_v2"} <= names


def test_no_kernel_rows_with_cuda_tracing_off_says_so(tmp_path, capsys):
    b = ExportBuilder()
    b.capture = {"PROCESS_0:COLLECT_CUDA_TRACE": "false", "PROCESS_0:COLLECT_NVTX_TRACE": "true"}
    with b.range("main"):
        b.host(1_000_000)
    path = b.write(tmp_path / "off.sqlite")
    report = diagnose(path)
    assert report.findings == [] and "CUDA tracing was off" in report.verdict
    assert main(["doctor", str(path), "--json"]) == 0
    assert "CUDA tracing was off" in json.loads(capsys.readouterr().out)["verdict"]


def test_no_kernel_rows_after_init_calls_is_a_capture_cut_short(tmp_path):
    b = ExportBuilder()
    b.capture = {"PROCESS_0:COLLECT_CUDA_TRACE": "true", "RUN_DURATION_MS": "10000"}
    for call in ("cuInit", "cuCtxSetCurrent", "cuStreamCreate"):
        b.api(call, 1_000)
    b.diagnostic("Number of CUPTI events produced: 31. Some CUPTI events might be missing.", severity=1)
    report = diagnose(b.write(tmp_path / "short.sqlite"))
    assert report.findings == []
    assert "3 CUDA API call(s)" in report.verdict and "launched no kernel, copy or memset" in report.verdict
    assert "stopped after 10 s" in report.verdict and "ended before the program's GPU work began" in report.verdict


def test_launches_whose_kernels_were_dropped_end_the_analysis_and_say_so(tmp_path):
    b = ExportBuilder()
    for _ in range(100):
        b.kernel("recorded", 50_000)
    for _ in range(400):
        b.kernel("lost", 50_000, record=False)  # the host keeps launching; nsys dropped their GPU records
    b.memcpy("DtoH", "device", "pinned", 1024, 5_000)
    b.diagnostic("Number of incomplete CUPTI events dropped: 400. Incomplete events appear when ...", severity=1)
    path = b.write(tmp_path / "drop.sqlite")
    report = diagnose(path)
    notes = " ".join(report.source["notes"])
    assert "dropped 400 events" in notes and "400 of 500 kernel launches" in notes
    # the stretch with no records is not idle GPU time: the recorded part was back-to-back kernels
    assert report.analyses["summary"]["gpu_busy_pct"] > 90
    assert report.findings[0].id == "not-judged"   # busy, on kernels with no op to price them: not judged


def test_dropped_events_are_in_every_output(tmp_path, capsys):
    b = ExportBuilder()
    for _ in range(20):
        b.kernel("k", 50_000)
    b.diagnostic("Number of incomplete CUPTI events dropped: 77.", severity=1)
    path = str(b.write(tmp_path / "d.sqlite"))
    said = "nsys dropped 77 events"
    assert main(["doctor", path]) == 0 and said in capsys.readouterr().out.replace("\n", " ")
    assert main(["doctor", path, "--json", "--html", str(tmp_path / "d.html")]) == 0
    assert any(said in n for n in json.loads(capsys.readouterr().out)["source"]["notes"])
    assert said in (tmp_path / "d.html").read_text()
    assert main(["stats", path, "--json"]) == 0 and any(said in n for n in json.loads(capsys.readouterr().out)["notes"])
    assert main(["stats", path, "--csv"]) == 0 and said in capsys.readouterr().err
    assert main(["diff", path, path, "--json"]) == 0 and any(said in n for n in json.loads(capsys.readouterr().out)["notes"])
    pytest.importorskip("duckdb")
    assert main(["sql", path, "SELECT note FROM notes", "--csv"]) == 0
    out = capsys.readouterr()
    assert said in out.out and said in out.err


def test_nsys_rep_without_nsys_gives_the_export_command(tmp_path, monkeypatch, capsys):
    rep = tmp_path / "run 1.nsys-rep"
    rep.write_bytes(b"\x00not-a-sqlite")
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert main(["doctor", str(rep)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"nsys export --type sqlite --output '{tmp_path / 'run 1.sqlite'}' '{rep}'" in err


def test_nsys_rep_goes_through_nsys_export_into_the_cache(tmp_path, monkeypatch):
    export = ExportBuilder()
    for _ in range(50):
        export.kernel("k", 10_000)
        export.synchronize()
    source = export.write(tmp_path / "made.sqlite")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "nsys"  # stands in for nsys: copies a prepared export where --output says
    fake.write_text(f"#!{sys.executable}\nimport shutil, sys\nargs = sys.argv[1:]\n"
                    f"open({str(tmp_path / 'calls')!r}, 'a').write(' '.join(args) + '\\n')\n"
                    f"shutil.copy({str(source)!r}, args[args.index('--output') + 1])\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PERFLAB_CACHE", str(tmp_path / "cache"))
    rep = tmp_path / "report.qdrep"
    rep.write_bytes(b"QDREP")
    first = diagnose(rep)
    second = diagnose(rep)
    assert first.findings[0].id == second.findings[0].id == "host-sync"
    calls = (tmp_path / "calls").read_text().splitlines()
    assert len(calls) == 1 and calls[0].startswith("export --type sqlite")  # exported once, then cached
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".sqlite") == ["made.sqlite"]  # nothing beside
    assert Path(first.source["path"]).parent == tmp_path / "cache" / "nsys-exports"


def test_stats_on_an_export_and_on_a_kineto_trace(tmp_path, capsys):
    b = ExportBuilder()
    for i in range(10):
        b.kernel("fast", 1_000 + i)
        b.kernel("slow", 100_000)
    b.memcpy("HtoD", "pinned", "device", 2_000_000, 200_000, blocking=False)
    with b.range("region"):
        b.host(5_000)
    path = b.write(tmp_path / "s.sqlite")
    assert main(["stats", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    kern = doc["reports"]["cuda_gpu_kern_sum"]
    assert kern["columns"][:3] == ["Time (%)", "Total Time (ns)", "Instances"]
    slow, fast = kern["rows"]
    assert slow[-1] == "slow" and slow[1] == 1_000_000 and slow[2] == 10
    assert fast[1] == sum(1_000 + i for i in range(10)) and fast[4] == 1_004.5 and fast[5] == 1_000
    assert fast[7] == pytest.approx(float(np.std([1_000 + i for i in range(10)], ddof=1)), abs=0.1)
    size = doc["reports"]["cuda_gpu_mem_size_sum"]["rows"]
    assert size == [[2.0, 1, 2.0, 2.0, 2.0, 2.0, 0.0, "[CUDA memcpy Host-to-Device]"]]
    assert doc["reports"]["nvtx_sum"]["rows"][0][-2:] == ["PushPop", "region"]
    api = {r[-1]: r[2] for r in doc["reports"]["cuda_api_sum"]["rows"]}
    assert api == {"cudaLaunchKernel": 20, "cudaMemcpyAsync": 1}
    assert main(["stats", str(path), "--csv", "-r", "cuda_gpu_kern_sum"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("Time (%),Total Time (ns),Instances") and lines[1].endswith(",slow")
    kineto = Path(__file__).resolve().parents[2] / "src/perflab/catalog/02-host-sync/artifacts/slow.trace.json.gz"
    assert main(["stats", str(kineto), "--json", "-r", "cuda_api_sum"]) == 0
    rows = json.loads(capsys.readouterr().out)["reports"]["cuda_api_sum"]["rows"]
    assert {r[-1] for r in rows} >= {"cudaGraphLaunch", "cudaStreamSynchronize"}


def test_sql_reads_both_formats_through_the_same_views(tmp_path, capsys):
    pytest.importorskip("duckdb")
    from perflab.analysis.reports.sql_views import VIEWS, open_db

    b = ExportBuilder()
    for _ in range(5):
        b.kernel("k", 10_000)
        b.synchronize("cudaStreamSynchronize_v3020", 2)
    path = b.write(tmp_path / "q.sqlite")
    kineto = Path(__file__).resolve().parents[2] / "src/perflab/catalog/02-host-sync/artifacts/slow.trace.json.gz"
    dbs = [open_db(path), open_db(kineto)]
    for view in VIEWS:
        cols = [db.query(f"SELECT * FROM {view} LIMIT 0")[0] for db in dbs]
        assert cols[0] == cols[1], view
    assert dbs[0].query("SELECT count(*), sum(dur_ns) FROM kernels")[1] == [(5, 50_000)]
    assert dbs[0].query("SELECT name, count(*) FROM api WHERE is_sync GROUP BY 1")[1] == [("cudaStreamSynchronize", 5)]
    assert dbs[0].query("SELECT min(queued_ns) >= 0 FROM gpu_ops WHERE launch_name = 'cudaLaunchKernel'")[1] == [(True,)]
    assert main(["sql", str(path), "SELECT count(*) AS n FROM kernels", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == [[5]]
    assert main(["sql", str(path), "SELECT nope FROM kernels"]) == 2
    assert "SQL error" in capsys.readouterr().err


def test_sql_without_duckdb_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "duckdb", None)
    path = ExportBuilder().write(tmp_path / "e.sqlite")
    assert main(["sql", str(path), "SELECT 1"]) == 2
    assert capsys.readouterr().err.strip() == ("perflab: error: perflab sql needs DuckDB: pip install 'perflab[sql]' "
                                               "(or pip install duckdb)")


def test_diff_across_formats_and_between_two_exports(tmp_path, capsys):
    def run(sync: bool) -> Path:
        b = ExportBuilder()
        for _ in range(100):
            b.kernel("k", 30_000)
            if sync:
                b.synchronize()
                b.host(40_000)
        return b.write(tmp_path / f"{'sync' if sync else 'async'}.sqlite")

    slow, fast = run(True), run(False)
    assert main(["diff", str(slow), str(fast), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["speedup"] > 2 and "host-sync" in [f["id"] for f in d["findings"] if f["status"] == "disappeared"]
    kineto = Path(__file__).resolve().parents[2] / "src/perflab/catalog/02-host-sync/artifacts/slow.trace.json.gz"
    assert main(["diff", str(kineto), str(fast), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["after"]["path"] == str(fast)


def test_a_capture_with_no_gpu_work_cannot_be_diffed(tmp_path):
    from perflab.doctor.sides import load_run

    b = ExportBuilder()
    b.api("cuInit", 1000)
    with pytest.raises(PerflabError, match="no GPU activity"):
        load_run(b.write(tmp_path / "x.sqlite"))


def test_blocks_too_small_to_fill_an_sm_are_low_occupancy(tmp_path):
    def run(block: int):
        b = ExportBuilder()
        for _ in range(300):
            b.kernel("stencil_kernel(float*)", 200_000, grid=(65536, 1, 1), block=(block, 1, 1))
        return diagnose(b.write(tmp_path / f"b{block}.sqlite"))

    small = run(16)  # the builder's GPU: 32 blocks and 64 warps per SM (sm_90)
    top = small.findings[0]
    assert top.id == "low-occupancy" and top.evidence["theoretical_occupancy_pct"] == 50.0
    assert top.evidence["active_lanes_pct"] == 50.0 and "16-thread blocks" in top.summary
    assert "low-occupancy" not in _ids(run(256))
