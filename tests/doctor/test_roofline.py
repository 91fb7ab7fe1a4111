import json
import math

import pytest

from test_ncu_fixtures import DATA, csv, fixtures, profile
from perflab.__main__ import main
from perflab.analysis.work import roofline as rl
from perflab.trace.ncu import NcuProfile


def measured():
    return rl.ceilings_from(json.loads((DATA / "ceilings_h100_full.json").read_text()))


def test_fp32_flops_count_the_sgemm_exactly():
    w = rl.kernel_work(profile("no_tensor_cores", "csv").kernels[0])
    assert w.dominant == "fp32" and math.isclose(w.flops["fp32"], 2 * 4096**3, rel_tol=1e-6)


def test_tensor_flops_count_the_bf16_gemms():
    wmma = rl.kernel_work(profile("tile_quantization", "csv").kernels[0])
    assert wmma.dominant == "tensor_bf16"
    assert math.isclose(wmma.flops["tensor_bf16"], 256 * 384 * 384 * 4096 * 2, rel_tol=1e-4)  # padded tiles
    cublas = rl.kernel_work(profile("gemm_bf16_torch", "csv").kernels[0])
    assert cublas.flops["tensor_bf16"] == pytest.approx(2 * 8192**3, rel=0.03)


def test_measured_ceilings_are_labelled_and_fill_gaps_from_the_datasheet():
    c = measured()
    assert "measured on NVIDIA H100" in c.dram.source and 2.5e12 < c.dram.value < 3.4e12
    assert c.compute["bf16"].source.startswith("measured") and c.compute["fp64"].source.startswith("datasheet")
    assert "l2" in c.memory


def test_datasheet_fallback_is_labelled_with_its_source():
    c = rl.load_ceilings(device="NVIDIA H100 80GB HBM3")  # no bench saved in this test's user dir
    assert c.source.startswith("datasheet: NVIDIA H100") and c.dram.value == 3.35e12
    assert rl.datasheet_for("NVIDIA H200")[0] == "H200" and rl.datasheet_for("NVIDIA H100 PCIe")[0] == "H100 PCIe"


@pytest.mark.parametrize("name,bound", [("copy_vec16", "memory"), ("memory_bound_scalar", "memory"),
                                        ("gemm_bf16_torch", "compute"), ("fma_throughput", "compute"),
                                        ("no_tensor_cores", "compute")])
def test_ridge_point_classifies(name, bound):
    p = rl.place(profile(name, "csv").kernels[0], measured())
    assert p.bound == bound
    if p.intensity:
        assert (p.intensity < p.ridge) == (bound == "memory")


def test_copy_sits_near_the_measured_dram_roof():
    p = rl.place(profile("copy_vec16", "csv").kernels[0], measured())
    assert 85 <= p.pct_of_roof <= 105


def _all_fixtures():
    kernels = []
    for name, _ in fixtures():
        kernels += profile(name, "csv").kernels
    return NcuProfile(path="all fixtures", source="csv", kernels=kernels)


@pytest.mark.parametrize("suffix", [".png", ".html"])
def test_figure_is_written(tmp_path, suffix):
    pytest.importorskip("matplotlib")
    from perflab.report.roofline_plot import save_roofline

    out = save_roofline(rl.roofline(_all_fixtures(), measured()), tmp_path / f"roof{suffix}")
    data = out.read_bytes()
    assert len(data) > 20_000
    if suffix == ".png":
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        assert b"data:image/png;base64," in data and b"sgemm_simt_128x128" in data


def test_roofline_cli_json_and_bad_suffix(tmp_path, capsys):
    assert main(["roofline", str(csv("gemm_bf16_torch")), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["schema"] == "perflab.roofline/1" and d["kernels"][0]["bound"] == "compute"
    assert d["ceilings"]["source"].startswith("datasheet")
    assert main(["roofline", str(csv("gemm_bf16_torch")), "--out", str(tmp_path / "r.jpg")]) == 2
    assert "png, .svg, .pdf or .html" in capsys.readouterr().err


def test_several_reports_share_one_roofline(tmp_path, capsys):
    png = tmp_path / "roof.png"
    assert main(["roofline", str(DATA / "l2_miss.csv"), str(DATA / "copy_vec16.csv"),
                 "--ceilings", str(DATA / "ceilings_h100_full.json"), "--json", "-o", str(png)]) == 0
    names = [k["name"] for k in json.loads(capsys.readouterr().out)["kernels"]]
    assert names == ["l2_miss: reuse_far_apart", "copy_vec16: copy_vec16"]
    assert png.stat().st_size > 10_000
