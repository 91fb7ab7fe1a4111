"""fp8-weight-only's configs table (artifacts/configs.json, recorded on the H100 by scripts/record.py fp8-configs):
one process per configuration, and the README quotes the file's figures (read here, never typed)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from perflab.workloads import fp8

FOLDER = Path(__file__).resolve().parents[2] / "src" / "perflab" / "catalog" / "40-fp8-weight-only"
CONFIGS = ["bf16", "torchao-float8wo", "torchao-float8dq", "perflab-dequant", "perflab-fused"]


@pytest.fixture(scope="module")
def doc():
    return json.loads((FOLDER / "artifacts" / "configs.json").read_text())


@pytest.fixture(scope="module")
def readme():
    return (FOLDER / "README.md").read_text()


def test_every_model_row_was_measured_in_its_own_process(doc):
    rows = doc["model_rows"]
    assert [r["config"] for r in rows] == CONFIGS  # puzzle.toml's questions address rows by index
    for r in rows:
        assert r["process"] == "fresh" and "error" not in r and "graph_error" not in r
        # a clean process: the inference never allocates less than the model's own weights
        assert r["eager_peak_allocated_mb"] >= r["weights_mb"] and r["graph_peak_allocated_mb"] >= r["weights_mb"]
        assert r["graph_peak_reserved_mb"] >= r["graph_peak_allocated_mb"]
        assert r["graph_weight_gbps"] == pytest.approx(r["weight_bytes"] * r["graph_decode_tok_s"] / 1e9, rel=0.01)
    assert doc["torchao"] == "0.18.0" and "H100" in doc["gpu"]


def test_fp8_rows_store_half_the_bytes_of_bf16(doc):
    rows = {r["config"]: r for r in doc["model_rows"]}
    for name in CONFIGS[1:]:
        assert rows[name]["weight_bytes"] < 0.55 * rows["bf16"]["weight_bytes"]
        assert rows[name]["weights_mb"] < 0.6 * rows["bf16"]["weights_mb"]


def test_readme_table_is_the_file_s(doc, readme):
    start, end = "<!-- configs-table", "<!-- /configs-table -->"
    block = readme[readme.index(start):readme.index(end)]
    assert fp8.configs_table(doc) in block


def test_readme_symptom_statement_quotes_the_file(doc, readme):
    statement = readme[readme.index("Which symptoms reproduce"):]
    for key, text in fp8.symptom_figures(doc).items():
        assert text in statement, f"README does not quote {key} = {text} from configs.json"


def test_both_symptoms_reproduce_in_the_recording(doc):
    """What the README states, decided from the numbers: float8wo slower AND bigger than bf16."""
    rows = {r["config"]: r for r in doc["model_rows"]}
    b, w = rows["bf16"], rows["torchao-float8wo"]
    assert w["graph_decode_tok_s"] < b["graph_decode_tok_s"] / 2
    assert w["weights_mb"] < b["weights_mb"] and w["graph_peak_reserved_mb"] > b["graph_peak_reserved_mb"]
    assert w["eager_peak_allocated_mb"] > b["eager_peak_allocated_mb"]
    assert rows["perflab-fused"]["graph_decode_tok_s"] > b["graph_decode_tok_s"]  # the stretch goal


def test_table_renders_an_error_row():
    row = {"config": "torchao-float8wo", "error": "worker timeout: no result within 60 s"}
    table = fp8.configs_table({"model_rows": [row]})
    assert "Float8WeightOnlyConfig | error: worker timeout" in table
