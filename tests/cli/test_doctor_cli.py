"""perflab doctor: human summary, versioned JSON, options, dispatch by content, one-line errors."""
from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path

import pytest

from perflab.__main__ import main
from perflab.doctor import diagnose
from perflab.doctor.finding import SCHEMA, TAXONOMY_IDS
from perflab.errors import PerflabError
from perflab.trace.builders import synthetic

PEER = Path(os.environ.get("PERFLAB_PEER_TRACES", Path(__file__).resolve().parents[3] / "shared" / "peer-traces" / "hta"))


@pytest.fixture
def slow_trace(tmp_path):
    return synthetic.launch_bound(steps=2, ops=120).write(tmp_path / "launch.json.gz")


def test_human_summary_starts_with_the_verdict(slow_trace, capsys):
    assert main(["doctor", str(slow_trace)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "kernels per step" in out[1] and "launch" in out[1]
    text = "\n".join(out)
    assert "launch-overhead" in text and "fix:" in text


def test_json_schema(slow_trace, capsys):
    assert main(["doctor", "--json", str(slow_trace)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == SCHEMA
    assert doc["source"]["kind"] == "kineto" and doc["source"]["device"] == synthetic.H100
    assert doc["source"]["ranks"] == [0]
    f = doc["findings"][0]
    assert f["id"] == "launch-overhead" and f["id"] in TAXONOMY_IDS and f["level"] == "system"
    assert set(f) >= {"id", "level", "severity", "gain_pct", "evidence", "events", "fix", "summary"}
    assert {"name", "ts_us", "dur_us"} <= set(f["events"][0])
    assert {"summary", "idle", "hta"} <= set(doc["analyses"])
    gains = [(x["severity"], x["gain_pct"]) for x in doc["findings"]]
    assert gains[0][1] >= max(g for s, g in gains if s == gains[0][0])


def test_rank_and_step_options(tmp_path, capsys):
    busy = synthetic.gpu_bound(steps=2, layers=20)
    idle = synthetic.launch_bound(steps=2, ops=100)
    for rank, b in ((0, idle), (1, busy)):
        b.rank, b.world_size = rank, 2
        b.write(tmp_path / f"rank{rank}.json")
    assert main(["doctor", "--json", "--rank", "1", str(tmp_path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["source"]["rank"] == 1 and doc["source"]["ranks"] == [0, 1]
    assert doc["findings"][0]["id"] == "not-judged" and doc["verdict"].startswith("Not judged")  # busy, no shapes
    assert main(["doctor", "--json", "--step", "1", str(tmp_path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["source"]["window"]["steps"] == [1] and doc["findings"][0]["id"] == "launch-overhead"


@pytest.mark.parametrize("args, message", [
    (["--rank", "7"], "no trace for rank 7"),
    (["--step", "99"], "no ProfilerStep#99"),
])
def test_bad_options_are_one_line(slow_trace, capsys, args, message):
    assert main(["doctor", *args, str(slow_trace)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("content", [b"", b"hello", b'{"traceEvents": [', b'{"a": 1}', b"\x1f\x8b\x08\x00broken"])
def test_bad_files_are_one_line(tmp_path, capsys, content):
    path = tmp_path / "x.json"
    path.write_bytes(content)
    assert main(["doctor", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("perflab: error: ") and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_cpu_only_trace_gets_a_clear_answer(tmp_path):
    cpu = {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1, "dur": 5}
    rep = diagnose(synthetic.write_document(tmp_path / "cpu.json", synthetic.document([cpu])))
    assert rep.findings == [] and "CPU-only" in rep.verdict


def test_memory_snapshot_dispatches_lazily(tmp_path, monkeypatch):
    snap = tmp_path / "snap.pickle"
    snap.write_bytes(b"\x80\x04}\x94.")
    monkeypatch.setitem(sys.modules, "perflab.doctor.memory", None)  # the reader is not there
    with pytest.raises(PerflabError, match="memory snapshot reader is not available yet"):
        diagnose(snap)
    fake = types.ModuleType("perflab.doctor.memory")
    fake.diagnose_memory = lambda path: ("memory", Path(path).name)
    monkeypatch.setitem(sys.modules, "perflab.doctor.memory", fake)
    assert diagnose(snap) == ("memory", "snap.pickle")


def test_ncu_report_dispatches_by_content(tmp_path, monkeypatch):
    rep = tmp_path / "whatever.json"  # the name lies: the content is an Nsight Compute report
    rep.write_bytes(b"NVR\x00" + bytes(64))
    fake = types.ModuleType("perflab.doctor.ncu")
    fake.diagnose_ncu = lambda path: "ncu"
    monkeypatch.setitem(sys.modules, "perflab.doctor.ncu", fake)
    assert diagnose(rep) == "ncu"


@pytest.mark.skipif(not PEER.exists(), reason="peer traces not mounted")
def test_doctor_on_peer_traces(capsys):
    expect_top = {"ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz": "no-tensor-cores",
                  "negative_queue_length_values_check__rank0.json.gz": "gpu-idle",
                  "nccl_parser_config__nccl_data.json.gz": "host-compute"}
    for f in sorted(PEER.glob("*.json*")):
        if f.stat().st_size > 2_000_000:
            continue  # the big ones are covered by the reader and HTA tests
        rep = diagnose(f)
        json.dumps(rep.to_dict())
        if f.name in expect_top:
            assert rep.top.id == expect_top[f.name]
        if "cpu_only" in f.name:  # a gloo job: the step thread waits while all-reduces run on gloo's threads
            assert [x.id for x in rep.findings] == ["comm-not-overlapped", "host-compute"]
            assert rep.verdict.startswith("CPU-only trace (no GPU activity): The step thread waits in collectives "
                                          "(gloo:all_reduce) 85%")
        if "cupti_profiler" in f.name:  # kernels recorded as CUPTI profiler ranges: no timeline to judge
            assert rep.findings == [] and "CUPTI profiler ranges" in rep.verdict


@pytest.mark.skipif(not PEER.is_dir(), reason="peer traces not available")
def test_doctor_prints_where_a_cpu_only_step_goes(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    assert main(["doctor", str(PEER / "cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")]) == 0
    out = capsys.readouterr().out
    assert "CPU only; step thread: ops 0%, comm 85%, dataloader 0%, python 15%" in out and "GPU busy" not in out


NCU_DATA = Path(__file__).parents[1] / "data" / "ncu"


@pytest.mark.parametrize("name", ["atomic_contention.ncu-rep.gz", "atomic_contention.csv"])
def test_doctor_dispatches_ncu_reports_by_content(name, capsys):
    assert main(["doctor", str(NCU_DATA / name), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["source"]["kind"] == "ncu"
    assert out["findings"][0]["id"] == "atomic-contention"
