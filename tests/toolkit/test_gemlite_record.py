"""GemLite's choice per batch size (42-autotune/artifacts/gemlite.json, recorded on the H100 by
scripts/record.py gemlite-configs): the analysis (analysis/work/gemlite.py), its questions (questions_seeds.py), and the
README table read from the file. Synthetic records check the arithmetic; the shipped one the facts."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from perflab.__main__ import main
from perflab.analysis.work import gemlite
from perflab.errors import PerflabError
from perflab.puzzles import questions

from perflab.puzzles.engine import replay, spec
FOLDER = Path(__file__).resolve().parents[2] / "src" / "perflab" / "catalog" / "42-autotune"
RECORD = FOLDER / "artifacts" / "gemlite.json"
SPLITK = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "SPLIT_K": 8, "num_warps": 4, "num_stages": 1}
GEMM = {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 128, "num_warps": 4, "num_stages": 5}
GEMV = {"BLOCK_SIZE_M": 1, "BLOCK_SIZE_N": 512, "BLOCK_SIZE_K": 16, "num_warps": 4, "num_stages": 2}


def synthetic() -> dict:
    fam = lambda m: "GEMV_REVSPLITK" if m <= 4 else "GEMM_SPLITK" if m < 64 else "GEMM"  # noqa: E731
    sel = [[m, fam(m), m, m not in (2, 3, 4, 64)] for m in range(1, 129)]
    return {"layer": {"N": 3072, "K": 8192, "group_size": 128, "W_nbits": 4}, "sms": 132, "gpu": "GPU",
            "gemlite": "0.6.0.post2", "config_file": "h100.json",
            "selection": {"columns": ["M", "family", "M_bucket", "in_config_file"], "rows": sel},
            "calls": [{"M": 64, "family": "GEMM", "config": GEMM, "source": "autotuned on first call", "candidates": 12,
                       "autotune_s": 7.0, "gemlite_ms": 0.04, "bf16_ms": 0.025},
                      {"M": 16, "family": "GEMM_SPLITK", "config": SPLITK, "source": "config file", "candidates": 1,
                       "autotune_s": 0.4, "gemlite_ms": 0.018, "bf16_ms": 0.024},
                      {"M": 1, "family": "GEMV_REVSPLITK", "config": GEMV, "source": "config file", "candidates": 1,
                       "autotune_s": 0.6, "gemlite_ms": 0.011, "bf16_ms": 0.022}],
            "forced": [{"M": 64, "family": "GEMM_SPLITK", "config": SPLITK, "in_config_file": True, "gemlite_ms": 0.02}]}


def test_rows_derive_the_launch_from_the_config():
    r = {row["M"]: row for row in gemlite.rows(synthetic())}
    assert list(r) == [1, 16, 64]  # sorted by M
    assert r[16]["ctas_without_split_k"] == 48 and r[16]["ctas"] == 48 * 8 and r[16]["split_k"] == 8
    assert r[16]["waves"] == pytest.approx(384 / 132, abs=1e-3)
    assert r[64]["ctas"] == 96 and r[64]["split_k"] == 1  # GEMM: no split-K dimension
    assert r[1]["ctas"] == 6 * (8192 // 32)  # GEMV_REVSPLITK: grid z = cdiv(K, 2 BLOCK_K)
    assert r[16]["config"] == "16x64x128 split-K 8 w4 s1" and r[16]["config.BLOCK_SIZE_M"] == 16


def test_switches_holes_and_forced_family():
    doc = synthetic()
    assert gemlite.switches(doc) == [{"M": 1, "family": "GEMV_REVSPLITK"}, {"M": 5, "family": "GEMM_SPLITK"},
                                     {"M": 64, "family": "GEMM"}]
    assert gemlite.switch_m(doc, "GEMM") == 64
    assert [(h["first"], h["last"], h["count"]) for h in gemlite.holes(doc)] == [(2, 4, 3), (64, 64, 1)]
    f = gemlite.forced(doc, 64)
    assert f["picked"] == "GEMM" and f["forced"] == "GEMM_SPLITK" and f["picked_over_forced"] == pytest.approx(2.0)
    with pytest.raises(PerflabError, match="never selects 'GEMV'"):
        gemlite.switch_m(doc, "GEMV")
    with pytest.raises(PerflabError, match="no call at M=8"):
        gemlite.call(doc, 8)
    with pytest.raises(PerflabError, match="forced no other family at M=16"):
        gemlite.forced(doc, 16)


def test_unreadable_records_are_one_line_errors(tmp_path):
    bad = tmp_path / "gemlite.json"
    bad.write_text("{")
    with pytest.raises(PerflabError, match="not a readable GemLite record"):
        gemlite.load(bad)
    bad.write_text("{}")
    with pytest.raises(PerflabError, match="not a GemLite record"):
        gemlite.load(bad)


def test_questions_compute_from_the_record(tmp_path):
    (tmp_path / "gemlite.json").write_text(json.dumps(synthetic()))
    ev = replay.Evidence(tmp_path, "autotune")
    A = questions.ANALYSES
    assert A["gemlite_switch_m"](ev, family="GEMM_SPLITK").value == 5
    assert A["gemlite_holes"](ev).value == 4
    assert A["gemlite_call_value"](ev, m=16, field="ctas_without_split_k").value == 48
    assert A["gemlite_forced_ratio"](ev, m=64).value == pytest.approx(2.0)
    with pytest.raises(PerflabError, match="has no value 'nope'"):
        A["gemlite_call_value"](ev, m=16, field="nope")
    with pytest.raises(PerflabError, match="no GemLite record"):
        A["gemlite_holes"](replay.Evidence(tmp_path / "missing", "autotune"))


def test_the_shipped_record_was_made_on_the_h100_with_gemlite():
    doc = gemlite.load(RECORD)
    assert "H100" in doc["gpu"] and doc["gemlite"] == "0.6.0.post2" and doc["config_file"] == "h100.json"
    assert not doc["errors"] and all("error" not in c for c in doc["calls"])
    rows = gemlite.rows(doc)
    assert {r["family"] for r in rows} >= {"GEMV_REVSPLITK", "GEMM_SPLITK", "GEMM"}
    for r in rows:  # every call computed the layer right (4-bit weights, bf16 sums) and came from a named source
        assert r["max_abs_err_vs_dequantized"] < 0.1 * r["max_abs_ref"]
        assert r["source"] in ("config file", "autotuned on first call")
        assert (r["source"] == "config file") == r["in_config_file"]
    # a config-file hit times exactly one candidate; a miss runs the autotuner over several
    assert all((r["candidates"] == 1) == r["in_config_file"] for r in rows)


def test_readme_table_is_the_file_s():
    text = (FOLDER / "README.md").read_text()
    block = text[text.index("<!-- gemlite-table"):text.index("<!-- /gemlite-table -->")]
    assert gemlite.markdown_table(gemlite.load(RECORD)) in block


def test_puzzle_questions_grade_the_shipped_record(capsys):
    puzzle = spec.load(FOLDER / "puzzle.toml")
    ev = replay.Evidence(FOLDER / "artifacts", "autotune")
    keys = [q for q in puzzle.questions if q.analysis.startswith("gemlite_")]
    assert len(keys) >= 5
    for q in keys:
        c = questions.compute(q, ev)
        assert questions.grade(q, str(c.value), c).correct
        assert not questions.grade(q, str(c.value * 3 + 7), c).correct
    right = [f"{q.key}={questions.compute(q, ev).value}" for q in keys]
    argv = ["answer", "autotune"] + [a for r in right for a in ("-a", r)]
    assert main(argv) == 0
    assert f"{len(keys)}/{len(keys)} right" in capsys.readouterr().out
