"""`perflab diff A.ncu-rep B.ncu-rep`: the kernel-level diff of two Nsight Compute reports
(analysis/ncu/ncu_compare.py, rendered by report/diff.py), on 42-autotune's shipped slow/solution reports
(the same Triton kernel under two autotune configs), the tests/data/ncu fixtures, and synthetic profiles."""
from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from perflab.__main__ import main
from perflab.analysis.ncu.ncu_compare import SCHEMA, compare_ncu, key_metrics, match, rel_change
from perflab.doctor.sides import load_ncu_side
from perflab.errors import PerflabError
from perflab.report.diff import ncu_diff_json, render_ncu_diff
from perflab.trace.ncu import KernelProfile, NcuProfile

ROOT = Path(__file__).resolve().parents[2]
AUTOTUNE = ROOT / "src" / "perflab" / "catalog" / "42-autotune" / "artifacts"
NCU = ROOT / "tests" / "data" / "ncu"
NO_REPORT = SimpleNamespace(findings=[], analyses={"kernels": []})


@pytest.fixture(scope="module")
def autotune_sides():
    return load_ncu_side(AUTOTUNE / "slow.ncu-rep.gz"), load_ncu_side(AUTOTUNE / "solution.ncu-rep.gz")


def test_the_autotune_reports_diff_names_what_moved(autotune_sides):
    (pb, rb), (pa, ra) = autotune_sides
    d = compare_ncu(pb, pa, rb, ra)
    assert len(d.pairs) == 1 and not d.only_before and not d.only_after
    p = d.pairs[0]
    assert p.name == "matmul_kernel" and p.paired_by == "name"
    kb, ka = pb.kernels[0], pa.kernels[0]
    # every number is the reports' own
    assert p.speedup == pytest.approx(kb.duration_s / ka.duration_s)
    grid = p.metric("grid_size")
    assert (grid.before, grid.after) == (kb.get("launch__grid_size"), ka.get("launch__grid_size"))
    assert grid.after > grid.before  # the fix launches more blocks
    waves = p.metric("waves_per_sm")
    assert waves.before == kb.get("launch__waves_per_multiprocessor") < 1
    # sorted by how far each metric moved
    moved = [rel_change(m) for m in p.metrics]
    assert moved == sorted(moved, reverse=True)
    # the doctor's planted finding is gone on the fixed config
    assert "small-grid" in p.by_status("disappeared")
    assert any("waves per SM" in r for r in p.readings)
    assert d.verdict.startswith(f"matmul_kernel: {p.speedup:.2f}x faster") and "gone: small-grid" in d.verdict


def test_kernel_filter_and_its_errors(autotune_sides):
    (pb, rb), (pa, ra) = autotune_sides
    assert len(compare_ncu(pb, pa, rb, ra, kernel="matmul").pairs) == 1
    with pytest.raises(PerflabError, match="no kernel matches --kernel 'gemv'"):
        compare_ncu(pb, pa, rb, ra, kernel="gemv")
    with pytest.raises(PerflabError, match="not a regular expression"):
        compare_ncu(pb, pa, rb, ra, kernel="(")


def test_two_fixture_kernels_pair_by_position_when_names_differ():
    (pb, rb), (pa, ra) = load_ncu_side(NCU / "v_transpose_naive.csv"), load_ncu_side(NCU / "v_smem_transpose.csv")
    d = compare_ncu(pb, pa, rb, ra)
    p = d.pairs[0]
    assert p.paired_by == "position" and p.name == "transpose_naive -> smem_transpose_unpadded"
    assert any("paired by position" in n for n in d.notes)
    assert p.speedup == pytest.approx(pb.kernels[0].duration_s / pa.kernels[0].duration_s)
    # the doctor's finding on each: the naive transpose's uncoalesced reads go, the tile's bank conflicts come
    assert "uncoalesced-access" in p.by_status("disappeared") and "bank-conflicts" in p.by_status("appeared")


def kp(index, name, **metrics):
    return KernelProfile(index=index, name=name, full_name=name, metrics=metrics)


def test_match_pairs_launches_by_name_in_order():
    before = [kp(0, "a", **{"gpu__time_duration.sum": 2e-6}), kp(1, "b"), kp(2, "a", **{"gpu__time_duration.sum": 4e-6}),
              kp(3, "only_b")]
    after = [kp(0, "a", **{"gpu__time_duration.sum": 1e-6}), kp(1, "a", **{"gpu__time_duration.sum": 1e-6}),
             kp(2, "b"), kp(3, "c1"), kp(4, "c2")]
    pairs, left_b, left_a = match(before, after)
    assert [(b.index, a.index, how) for b, a, how in pairs] == [(0, 0, "name"), (1, 2, "name"), (2, 1, "name")]
    assert [k.name for k in left_b] == ["only_b"] and [k.name for k in left_a] == ["c1", "c2"]
    d = compare_ncu(NcuProfile("B", "csv", before), NcuProfile("A", "csv", after), NO_REPORT, NO_REPORT)
    assert d.only_before == ["only_b"] and d.only_after == ["c1", "c2"]
    assert d.pairs[0].speedup == pytest.approx(4.0)  # the pair that moved most leads


def test_key_metrics_fall_back_and_zero_transitions_rank_first():
    k = kp(0, "k", **{"dram__throughput.avg.pct_of_peak_sustained_elapsed": 50.0, "gpu__time_duration.sum": 1e-5,
                      "launch__shared_mem_per_block_static": 2048.0})
    m = key_metrics(k)
    assert m["dram_throughput_pct"] == 50.0 and m["duration_us"] == pytest.approx(10.0) and m["shared_mem_kb"] == 2.0
    b = kp(0, "k", **{"l1tex__t_sector_hit_rate.pct": 0.0, "gpu__time_duration.sum": 1e-5})
    a = kp(0, "k", **{"l1tex__t_sector_hit_rate.pct": 40.0, "gpu__time_duration.sum": 0.5e-5})
    p = compare_ncu(NcuProfile("b", "csv", [b]), NcuProfile("a", "csv", [a]), NO_REPORT, NO_REPORT).pairs[0]
    assert p.metrics[0].name == "l1_hit_pct" and math.isinf(rel_change(p.metrics[0]))
    assert p.metrics[1].name == "duration_us"


def test_renderers(autotune_sides):
    from rich.console import Console

    (pb, rb), (pa, ra) = autotune_sides
    d = compare_ncu(pb, pa, rb, ra, before_label="slow", after_label="fix")
    doc = json.loads(ncu_diff_json(d))
    assert doc["schema"] == SCHEMA and doc["kernels"][0]["name"] == "matmul_kernel"
    assert doc["kernels"][0]["metrics"][0]["label"] and doc["kernels"][0]["readings"]
    console = Console(record=True, width=120)
    render_ncu_diff(d, console)
    text = console.export_text()
    assert "grid size (blocks)" in text and "small-grid" in text and "disappeared" in text


def test_cli_diffs_two_reports_and_refuses_mixed_input(capsys):
    slow, fix = str(AUTOTUNE / "slow.ncu-rep.gz"), str(AUTOTUNE / "solution.ncu-rep.gz")
    assert main(["diff", slow, fix, "--json", "--kernel", "matmul"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == SCHEMA and doc["kernels"][0]["speedup"] > 1
    assert main(["diff", slow, fix]) == 0
    assert "metrics by how far they moved" in capsys.readouterr().out
    for argv, msg in (
        (["diff", slow, str(AUTOTUNE / "slow.trace.json.gz")], "not one of each"),
        (["diff", str(AUTOTUNE / "slow.trace.json.gz"), str(NCU / "tail_effect.csv")], "not one of each"),
        (["diff", slow, fix, "--html", "x.html"], "apply to trace diffs"),
        (["diff", str(AUTOTUNE / "slow.trace.json.gz"), str(AUTOTUNE / "solution.trace.json.gz"), "--kernel", "x"],
         "--kernel selects kernels"),
        (["diff", slow, fix, "--kernel", "nothing_like_it"], "no kernel matches"),
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert msg in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
