import json

import pytest

from test_ncu_fixtures import DATA
from perflab.__main__ import main
from perflab.errors import PerflabError
from perflab.toolkit import bench


def recorded() -> dict:
    return json.loads((DATA / "ceilings_h100_full.json").read_text())


def test_recorded_ceilings_have_a_manifest_and_every_ceiling():
    data = recorded()
    assert data["schema"] == bench.SCHEMA
    man = data["manifest"]
    assert {"gpu", "driver", "clocks_mhz", "torch", "cuda", "date"} <= set(man)
    res = data["results"]
    for key in ("dram_copy", "dram_read_smem", "l2_read", "h2d_pinned", "d2h_pinned", "h2d_pageable",
                "d2h_pageable", "matmul_bf16", "matmul_fp16", "matmul_fp8_e4m3", "matmul_tf32", "matmul_fp32",
                "launch_latency", "graph_replay_per_kernel", "disk_read", "disk_write"):
        assert "value" in res[key], key
    # the brief's bar: reading DRAM into shared memory at >= 90 % of the copy bandwidth
    assert res["dram_read_smem"]["value"] >= 0.9 * res["dram_copy"]["value"]


def test_quick_bench_ran_under_30_seconds():
    assert json.loads((DATA / "ceilings_h100_quick.json").read_text())["manifest"]["seconds"] < 30


def test_save_and_load_round_trip(tmp_path):
    path = bench.save_ceilings(recorded())
    assert path.parent.exists() and path.name == "ceilings.json"
    assert bench.load_ceilings()["results"]["matmul_bf16"]["unit"] == "TFLOP/s"


def test_no_saved_ceilings_reads_as_none():
    assert bench.load_ceilings() is None


@pytest.mark.parametrize("content", ["{not json", json.dumps({"schema": "other"})])
def test_corrupt_ceilings_file_is_a_one_line_error(content):
    bench.ceilings_path().write_text(content)
    with pytest.raises(PerflabError, match="rerun `perflab bench`"):
        bench.load_ceilings()


def test_table_rows_show_errors_and_the_smem_ratio():
    data = {"results": {"dram_copy": {"value": 2800.0, "unit": "GB/s", "method": "copy"},
                        "dram_read_smem": {"value": 2900.0, "unit": "GB/s", "method": "smem", "pct_of_copy": 103.6},
                        "matmul_fp8_e4m3": {"error": "RuntimeError: no fp8"}}}
    rows = bench.table_rows(data)
    assert rows[0] == ("dram_copy", "2,800.00 GB/s", "copy")
    assert "103.6 % of copy" in rows[1][2] and rows[2] == ("matmul_fp8_e4m3", "n/a", "RuntimeError: no fp8")


def test_bench_without_gpu_exits_2_with_one_line(monkeypatch, capsys):
    monkeypatch.setattr(bench, "require_gpu", lambda: (_ for _ in ()).throw(
        bench.NeedsGPU("perflab bench needs an NVIDIA GPU and none is visible")))
    assert main(["bench", "--quick"]) == 2
    err = capsys.readouterr().err
    assert err == "perflab: error: perflab bench needs an NVIDIA GPU and none is visible\n"


def test_require_gpu_on_a_machine_without_cuda():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(bench.NeedsGPU):
        bench.require_gpu()
