"""perflab on the real Nsight Systems exports of ../shared/real-traces/nsys/ (skipped when the folder is absent).

The expected numbers come from reading each export as an expert would: counted with SQL straight from the
file (`_sql`), or an independent computation here (busy time as the union of the GPU intervals).
"""
from __future__ import annotations

import csv
import json
import sqlite3
import statistics
from pathlib import Path

import pytest

from perflab.__main__ import main
from perflab.doctor import diagnose

FOLDER = Path(__file__).resolve().parents[3] / "shared" / "real-traces" / "nsys"
pytestmark = pytest.mark.skipif(not FOLDER.is_dir(), reason="../shared/real-traces/nsys is absent")

# export -> (nsys version, GPU, kernel rows, top finding of the doctor). concurrent.s1: the host sits 29 ms in
# cudaHostAlloc/cudaFreeHost/cudaMalloc/cudaFree (inside its one init_data range) while the GPU waits: the
# allocator calls are the cause the range only encloses.
EXPORTS = {
    "extra-p__extrap__concurrent.s1_profile1.sqlite": ("2022.1.1.61", "GeForce GTX 1060 with Max-Q Design", 12,
                                                       "allocator-churn"),
    "extra-p__extrap__ex-gpu.s10.sqlite": (None, "A100-PCIE-40GB", 6, "host-compute"),
    "bwyogatama__Mordred-Deprecated__report1.sqlite": ("2021.2.1", "Quadro RTX 6000", 12, "host-compute"),
    "kmcho2019__Rodinia_3.1_Gaussian__report2.sqlite": ("2022.4.2.1", "NVIDIA GeForce RTX 3090", 8190,
                                                        "low-occupancy"),
    "NVIDIA__Fuser__report2.sqlite": ("2024.6.2.25", "NVIDIA H200", 19, "host-compute"),
    "NVIDIA__Fuser__report1.sqlite": ("2025.1.1.110", "NVIDIA H200", 18, "host-compute"),
    "cestwc__balinski-and-gomory-cuda__report11.sqlite": ("2025.5.1.121", "NVIDIA GeForce RTX 3090", 6039, "host-sync"),
    "Navi-AI-Lab__nvllm__B_harness_grid_4_active_run.sqlite": ("2025.6.3.541", "NVIDIA GB10", 143, "host-compute"),
    "lighttransport__gemm__profile.sqlite": ("2025.1.3.140", "NVIDIA GeForce RTX 5060 Ti", 0, None),
    "D-W-Chiang__JACC.jl__cg_trace.sqlite": ("2026.2.1.210", "NVIDIA A100 80GB PCIe", 0, None),
}
GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")


def _sql(name: str, query: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{FOLDER / name}?mode=ro&immutable=1", uri=True)
    con.text_factory = lambda b: b.decode("utf-8", "replace")
    try:
        return con.execute(query).fetchall()
    except sqlite3.OperationalError:  # the table is not in this export
        return []
    finally:
        con.close()


def _busy_pct(name: str, lo_ns: float, hi_ns: float) -> float:
    """Union of every kernel/copy/memset interval inside [lo, hi], by a plain sweep over the file's rows."""
    spans = sorted(r for t in GPU_TABLES for r in _sql(name, f"SELECT start, end FROM {t}"))
    busy, reach = 0.0, lo_ns
    for s, e in spans:
        s, e = max(s, reach), min(e, hi_ns)
        if e > s:
            busy += e - s
            reach = e
    return 100.0 * busy / (hi_ns - lo_ns)


@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_doctor_reads_every_export(name):
    version, gpu, kernels, top = EXPORTS[name]
    report = diagnose(FOLDER / name)
    assert report.source["kind"] == "nsys" and report.source["device"] == gpu
    assert (report.source.get("capture") or {}).get("nsys_version") == version
    assert kernels == (_sql(name, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL") or [(0,)])[0][0]
    if top is None:
        assert report.findings == [] and report.verdict.startswith("No GPU activity in this capture")
        return
    assert report.findings[0].id == top and report.findings[0].severity == "high"
    assert report.analyses["launches"]["kernels"] == kernels


def test_busy_over_the_gpu_window_matches_an_independent_sweep():
    for name in ("kmcho2019__Rodinia_3.1_Gaussian__report2.sqlite", "cestwc__balinski-and-gomory-cuda__report11.sqlite",
                 "bwyogatama__Mordred-Deprecated__report1.sqlite", "extra-p__extrap__concurrent.s1_profile1.sqlite"):
        report = diagnose(FOLDER / name)
        # the window: from the first call that launched GPU work to the end of the last GPU op
        first = min(r[0] for t in GPU_TABLES for r in _sql(
            name, f"SELECT min(r.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN {t} g USING (correlationId)") if r[0])
        last = max(r[0] for t in GPU_TABLES for r in _sql(name, f"SELECT max(end) FROM {t}") if r[0])
        assert report.analyses["summary"]["gpu_busy_pct"] == pytest.approx(_busy_pct(name, first, last), abs=0.05), name
    rodinia = diagnose(FOLDER / "kmcho2019__Rodinia_3.1_Gaussian__report2.sqlite")
    assert rodinia.analyses["summary"]["gpu_busy_pct"] == pytest.approx(97.67, abs=0.01)
    # busy, but in Fan2 with 16-thread blocks: 16 blocks per SM on sm_86 fill 16 of its 48 warp slots, half-empty
    ev = rodinia.findings[0].evidence
    assert (ev["threads_per_block"], ev["max_blocks_per_sm"], ev["max_warps_per_sm"]) == (16, 16, 48)
    assert (ev["theoretical_occupancy_pct"], ev["active_lanes_pct"]) == (33.33, 50.0)


def test_the_nvllm_capture_ends_where_its_kernel_records_stop():
    name = "Navi-AI-Lab__nvllm__B_harness_grid_4_active_run.sqlite"
    report = diagnose(FOLDER / name)
    # nsys dropped 24,806 incomplete events: kernel launches from some point on have no kernel row
    (tail_start,), = _sql(name, """
        WITH launches AS (SELECT r.start, k.correlationId IS NOT NULL AS rec FROM CUPTI_ACTIVITY_KIND_RUNTIME r
                          JOIN StringIds s ON s.id = r.nameId
                          LEFT JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId
                          WHERE s.value LIKE 'cudaLaunchKernel%' OR s.value LIKE 'cuLaunchKernel%')
        SELECT min(start) FROM launches WHERE start > (SELECT max(start) FROM launches WHERE rec)""")
    (first,), = _sql(name, "SELECT min(r.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN CUPTI_ACTIVITY_KIND_KERNEL k "
                           "USING (correlationId)")
    window = report.analyses["idle"]["window_us"]
    assert window == pytest.approx((tail_start - first) / 1e3, rel=1e-9)
    assert report.analyses["summary"]["gpu_busy_pct"] == pytest.approx(_busy_pct(name, first, tail_start), abs=0.05)
    notes = " ".join(report.source["notes"])
    assert "dropped 24,806 events" in notes and "24,801 of 24,944 kernel launches" in notes


def test_nvllm_kernel_median_agrees_with_the_projects_own_timing(capsys):
    name = "Navi-AI-Lab__nvllm__B_harness_grid_4_active_run.sqlite"
    assert main(["stats", str(FOLDER / name), "--json", "-r", "cuda_gpu_kern_sum"]) == 0
    rows = json.loads(capsys.readouterr().out)["reports"]["cuda_gpu_kern_sum"]["rows"]
    wo = next(r for r in rows if r[-1].startswith("kernel_cutlass__wo_kernel_body"))
    with open(FOLDER / "Navi-AI-Lab__nvllm__B_harness_grid_4_active_nsys_run_timing.csv") as fh:
        timed = [float(r["elapsed_us"]) for r in csv.DictReader(fh) if r["is_warmup"] == "0"]
    assert wo[2] == 33  # 33 of the 50 timed launches have a kernel row; nsys dropped the rest
    assert wo[4] / 1e3 == pytest.approx(statistics.median(timed), rel=0.01)


def test_copies_by_kind_bytes_and_bandwidth():
    rodinia = diagnose(FOLDER / "kmcho2019__Rodinia_3.1_Gaussian__report2.sqlite").analyses["copies"]
    for d, kind in (("h2d", 1), ("d2h", 2)):
        (n, nbytes, ns), = _sql("kmcho2019__Rodinia_3.1_Gaussian__report2.sqlite",
                               f"SELECT count(*), sum(bytes), sum(end - start) FROM CUPTI_ACTIVITY_KIND_MEMCPY "
                               f"WHERE copyKind = {kind} AND (srcKind = 0 OR dstKind = 0)")  # 0: pageable
        c = rodinia[d]
        assert (c["count"], c["bytes"], c["pageable_count"]) == (n, nbytes, n) == (3, 134_234_112, 3)
        assert c["gbps"] == pytest.approx(nbytes / ns, rel=1e-6)  # bytes per ns = GB/s: ~4.3-4.7, staged
    pinned = diagnose(FOLDER / "extra-p__extrap__concurrent.s1_profile1.sqlite").analyses["copies"]
    assert (pinned["h2d"]["count"], pinned["h2d"]["bytes"], pinned["h2d"]["pageable_count"]) == (15, 44_160_000, 0)
    assert pinned["h2d"]["gbps"] == pytest.approx(44_160_000 / 5_861_902, rel=1e-4)


def test_synchronizing_calls_are_counted_by_name():
    ces = diagnose(FOLDER / "cestwc__balinski-and-gomory-cuda__report11.sqlite").analyses["syncs"]
    assert ces["names"] == {"cudaDeviceSynchronize": 5108, "cudaMemcpy": 7, "cudaEventSynchronize": 2}
    top = diagnose(FOLDER / "cestwc__balinski-and-gomory-cuda__report11.sqlite").findings[0]
    assert top.id == "host-sync" and "cudaDeviceSynchronize" in top.fix  # a CUDA C++ program: CUDA's words
    rod = diagnose(FOLDER / "kmcho2019__Rodinia_3.1_Gaussian__report2.sqlite").analyses["syncs"]
    assert rod["names"] == {"cudaThreadSynchronize": 8190, "cudaMemcpy": 6}  # the deprecated spelling counts


def test_top_kernels_and_api_summary_agree_with_the_file(capsys):
    for name in ("kmcho2019__Rodinia_3.1_Gaussian__report2.sqlite", "cestwc__balinski-and-gomory-cuda__report11.sqlite",
                 "NVIDIA__Fuser__report1.sqlite"):
        assert main(["stats", str(FOLDER / name), "--json"]) == 0
        reports = json.loads(capsys.readouterr().out)["reports"]
        expect = _sql(name, "SELECT d.value, count(*), sum(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                            "JOIN StringIds d ON d.id = k.demangledName GROUP BY 1 ORDER BY 3 DESC, 1")
        got = [(r[-1], r[2], r[1]) for r in reports["cuda_gpu_kern_sum"]["rows"]]
        assert sorted(got) == sorted(expect) and got[0] == expect[0], name
        api = _sql(name, "SELECT count(DISTINCT (globalTid >> 24) || ':' || correlationId) "  # ids are per process
                         "FROM CUPTI_ACTIVITY_KIND_RUNTIME")[0][0]
        assert sum(r[2] for r in reports["cuda_api_sum"]["rows"]) == api
    assert got[0][0].startswith("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNN")  # Fuser report1's top kernel


def test_the_export_that_lists_each_call_twice(capsys):
    name = "extra-p__extrap__ex-gpu.s10.sqlite"
    assert main(["stats", str(FOLDER / name), "--json", "-r", "cuda_api_sum"]) == 0
    doc = json.loads(capsys.readouterr().out)
    calls = {r[-1]: r[2] for r in doc["reports"]["cuda_api_sum"]["rows"]}
    assert calls == {"cudaDeviceSynchronize": 7, "cudaLaunchKernel": 6, "cudaMalloc": 4, "cudaMemcpy": 1}
    assert any("18 CUDA API rows listed twice" in n for n in doc["notes"])


def test_captures_with_no_kernel_rows_say_why():
    off = diagnose(FOLDER / "D-W-Chiang__JACC.jl__cg_trace.sqlite")
    assert "CUDA tracing was off" in off.verdict and "COLLECT_CUDA_TRACE=false" in off.verdict
    short = diagnose(FOLDER / "lighttransport__gemm__profile.sqlite")
    assert "launched no kernel" in short.verdict and "stopped after 10 s" in short.verdict
    assert "CUDA events may be missing" in short.verdict


@pytest.mark.parametrize("name", ["NVIDIA__Fuser__report2.sqlite", "kmcho2019__Rodinia_3.1_Gaussian__report2.sqlite"])
def test_cli_outputs_on_real_exports(name, tmp_path, capsys):
    path = str(FOLDER / name)
    assert main(["doctor", path, "--json", "--html", str(tmp_path / "r.html")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "perflab.doctor/2" and doc["source"]["capture"]["export_schema"]
    assert "lanes" in (tmp_path / "r.html").read_text()
    assert main(["stats", path]) == 0 and "cuda_gpu_kern_sum" in capsys.readouterr().out
    pytest.importorskip("duckdb")
    assert main(["sql", path, "SELECT count(*) FROM kernels", "--csv"]) == 0
    count = _sql(name, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]
    assert capsys.readouterr().out.splitlines() == ["count_star()", str(count)]


def test_diff_of_two_real_exports(capsys):
    a, b = (str(FOLDER / n) for n in ("NVIDIA__Fuser__report2.sqlite", "NVIDIA__Fuser__report1.sqlite"))
    assert main(["diff", a, b, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["before"]["device"] == d["after"]["device"] == "NVIDIA H200"
    assert d["metrics"][0]["name"] == "step_time_ms" and d["speedup"] < 1
