import gzip
import math

import pytest

from test_ncu_fixtures import DATA, csv, fixtures, has_ncu_report, profile, report
from perflab.errors import UnreadableInput
from perflab.trace import ncu

needs_ncu_report = pytest.mark.skipif(not has_ncu_report(), reason="ncu-report not installed")


@pytest.mark.parametrize("unit,factor,base", [
    ("usecond", 1e-6, "second"), ("ms", 1e-3, "second"), ("ns", 1e-9, "second"), ("nsecond", 1e-9, "second"),
    ("Gbyte", 1e9, "byte"), ("Kbyte/block", 1e3, "byte/block"), ("Tbyte/s", 1e12, "byte/second"),
    ("cycle/nsecond", 1e9, "cycle/second"), ("Ghz", 1e9, "hz"), ("%", 1.0, "%"), ("sector", 1.0, "sector"),
    ("register/thread", 1.0, "register/thread"), ("", 1.0, ""), ("inst/cycle", 1.0, "inst/cycle")])
def test_units_normalize_to_base(unit, factor, base):
    f, b = ncu.normalize_unit(unit)
    assert math.isclose(f, factor) and b == base


def test_numbers_with_thousands_separators():
    assert ncu.parse_number("2,304") == 2304 and ncu.parse_number("n/a") is None and ncu.parse_number("") is None


def test_short_name_strips_parameters_and_void():
    assert ncu.short_name("void ns::k<int, (cute::X)0>(float *, int)") == "ns::k<int, (cute::X)0>"
    assert ncu.short_name("copy_vec16(const int4 *, int4 *, unsigned long)") == "copy_vec16"


def test_csv_reader_builds_the_model():
    p = profile("tile_quantization", "csv")
    k = p.kernels[0]
    assert p.source == "csv" and p.device == "NVIDIA H100 80GB HBM3"
    assert k.name == "gemm_bf16_wmma_tile128x128"
    assert k.grid == (3, 3, 256) and k.block == (256, 1, 1) and k.registers == 100
    assert k.nvtx == ["gemm_bf16 M=264 N=264 K=4096 batch=256"]
    assert math.isclose(k.duration_s, 4.2048e-3, rel_tol=1e-6)
    assert k.units["gpu__time_duration.sum"] == "second"
    assert math.isclose(k.get("dram__bytes_read.sum"), 1.630222e9, rel_tol=1e-6)  # exported as Gbyte


@needs_ncu_report
def test_both_readers_agree_on_the_metrics_the_rules_use():
    from perflab.toolkit.ncu_runner import EXTRA_METRICS

    a, b = profile("tile_quantization", "rep").kernels[0], profile("tile_quantization", "csv").kernels[0]
    assert profile("tile_quantization", "rep").source == "ncu_report"
    assert (a.name, a.grid, a.block, a.registers, a.shared_mem_bytes, a.nvtx) == \
           (b.name, b.grid, b.block, b.registers, b.shared_mem_bytes, b.nvtx)
    checked = 0
    for name in EXTRA_METRICS + ("launch__waves_per_multiprocessor", "memory_l2_theoretical_sectors_global"):
        va, vb = a.get(name), b.get(name)
        if va is None or vb is None:
            continue
        assert math.isclose(va, vb, rel_tol=2e-3, abs_tol=1e-2), name  # the CSV is rounded for display
        checked += 1
    assert checked > 40


def test_missing_metrics_read_as_none():
    k = profile("copy_vec16", "csv").kernels[0]
    assert k.get("no__such_metric.sum") is None and k.first("no__such", "gpu__time_duration.sum") > 0


@pytest.mark.parametrize("content", [b"", b"garbage\n", b"NVR\x00" + b"\x00" * 64, b'"a","b"\n1,2\n'])
def test_bad_files_raise_unreadable_input_with_one_line(tmp_path, content):
    path = tmp_path / "bad.ncu-rep"
    path.write_bytes(content)
    with pytest.raises(UnreadableInput) as err:
        ncu.load(path)
    assert "\n" not in str(err.value) and "bad.ncu-rep" in str(err.value)


def test_missing_file_is_unreadable(tmp_path):
    with pytest.raises(UnreadableInput, match="no such file"):
        ncu.load(tmp_path / "nope.ncu-rep")


def test_csv_without_kernel_rows(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text('"ID","Kernel Name","gpu__time_duration.sum"\n"","","ns"\n')
    with pytest.raises(UnreadableInput, match="no kernel rows"):
        ncu.load(path)


def test_sniff_by_content_not_name(tmp_path):
    renamed = tmp_path / "report.bin"
    renamed.write_bytes(gzip.decompress(report("copy_vec16").read_bytes()))
    assert ncu.sniff(renamed) == "rep"
    assert ncu.sniff(report("copy_vec16")) == "rep"  # gzipped
    assert ncu.sniff(csv("copy_vec16")) == "csv"
    text = tmp_path / "t.json"
    text.write_text("{}")
    assert ncu.sniff(text) is None


def test_gzipped_csv_reads(tmp_path):
    gz = tmp_path / "copy.csv.gz"
    gz.write_bytes(gzip.compress(csv("copy_vec16").read_bytes()))
    assert ncu.load(gz).kernels[0].name == "copy_vec16"


def test_rep_without_ncu_report_falls_back_to_the_csv_beside_it(monkeypatch):
    monkeypatch.setattr(ncu, "load_ncu_report_module", lambda: None)
    p = ncu.load(report("copy_vec16"))
    assert p.source == "csv" and p.path.endswith(".ncu-rep.gz") and p.kernels[0].name == "copy_vec16"


def test_rep_without_ncu_report_or_csv_says_what_to_do(monkeypatch, tmp_path):
    monkeypatch.setattr(ncu, "load_ncu_report_module", lambda: None)
    lone = tmp_path / "lone.ncu-rep"
    lone.write_bytes(gzip.decompress(report("copy_vec16").read_bytes()))
    with pytest.raises(UnreadableInput, match="pip install 'ncu-report>="):
        ncu.load(lone)


def test_every_shipped_fixture_has_report_csv_and_manifest():
    import json

    from test_ncu_fixtures import VALIDATION

    names = [n for n, _ in fixtures() + fixtures(VALIDATION)]
    assert len(names) >= 20
    for n in names:
        assert report(n).exists() and csv(n).exists(), n
    man = json.loads((DATA / "manifest.json").read_text())
    assert {"gpu", "driver", "ncu", "date", "command"} <= set(man) and "H100" in man["gpu"]
    total = sum(f.stat().st_size for f in DATA.iterdir())
    assert total < 15e6
