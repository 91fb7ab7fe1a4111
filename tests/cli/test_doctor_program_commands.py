"""The doctor's `perflab ncu ... -- CMD` lines name the program that ran when the trace says which (perflab profile
and investigate write it), and a placeholder for a trace recorded some other way."""
from __future__ import annotations

import gzip
import json
import shlex
from pathlib import Path

from perflab.__main__ import main
from perflab.doctor.investigation_system import read_level1

TRACE = Path(__file__).resolve().parents[2] / "src" / "perflab" / "catalog" / "50-uncoalesced-transpose" / "artifacts" / "slow.trace.json.gz"
PROGRAM = ["python", "my bench.py", "--size", "4096"]



def _doctor(path: Path, capsys) -> dict:
    assert main(["doctor", "--json", str(path)]) == 0
    return json.loads(capsys.readouterr().out)


def _with_program(tmp_path: Path, program) -> Path:
    doc = json.load(gzip.open(TRACE))
    doc["perflab_program"] = program
    out = tmp_path / "recorded.trace.json.gz"
    out.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return out


def test_a_bare_trace_keeps_the_placeholder(capsys):
    text = json.dumps(_doctor(TRACE, capsys)["findings"])
    assert "perflab ncu " in text and "-- python YOUR_SCRIPT.py" in text


def test_a_profiled_trace_names_its_program(tmp_path, capsys):
    text = json.dumps(_doctor(_with_program(tmp_path, PROGRAM), capsys)["findings"])
    assert "perflab ncu " in text and "YOUR_SCRIPT" not in text
    assert json.dumps(f"-- {shlex.join(PROGRAM)}")[1:-1] in text


def test_a_malformed_program_is_not_trusted(tmp_path, capsys):
    text = json.dumps(_doctor(_with_program(tmp_path, {"cmd": "rm -rf /"}), capsys)["findings"])
    assert "-- python YOUR_SCRIPT.py" in text and "rm -rf" not in text


def test_investigate_passes_the_command_to_the_doctor():
    l1 = read_level1([TRACE], program=PROGRAM)
    text = json.dumps([f.fix + json.dumps(f.evidence, default=str) for f in l1.report.findings])
    assert "YOUR_SCRIPT" not in text and "my bench.py" in text
