"""Folders of ranks: every file is accounted for, and traces of several jobs are never one world."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from perflab.__main__ import main
from perflab.doctor import diagnose
from perflab.errors import UnreadableInput
from perflab.trace import kineto
from perflab.trace.builders import synthetic

REAL = Path(os.environ.get("PERFLAB_REAL_TRACES", Path(__file__).resolve().parents[3] / "shared" / "real-traces"))
PEER = Path(os.environ.get("PERFLAB_PEER_TRACES", Path(__file__).resolve().parents[3] / "shared" / "peer-traces" / "hta"))


def _rank(folder: Path, rank: int, world: int, *, start_us: float = 1_000_000.0, name: str | None = None) -> Path:
    b = synthetic.TraceBuilder(rank=rank, world_size=world, start_us=start_us)
    for n in range(3):
        with b.step(n):
            for _ in range(10):
                b.op("aten::mm", [(synthetic.GEMM, 300.0, (132, 1, 1), (384, 1, 1))], cpu_us=12.0)
            b.wait_stream(20, 7)
            b.collective(800.0)
            b.wait_stream(7, 20)
            b.synchronize()
    return b.write(folder / (name or f"worker{rank}.pt.trace.json.gz"))


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_a_truncated_rank_is_listed_with_its_reason(tmp_path):
    """Was 'world size 2' with one rank and not a word about the other file."""
    _rank(tmp_path, 0, 2)
    _truncate(_rank(tmp_path, 1, 2))
    report = diagnose(tmp_path)
    folder = report.source["folder"]
    assert folder["ranks_read"] == [0] and folder["missing_ranks"] == [1] and folder["world_size"] == 2
    bad = next(f for f in folder["files"] if f["status"] == "unreadable")
    assert bad["path"].endswith("worker1.pt.trace.json.gz") and "complete" in bad["reason"] and "rank 1" in bad["reason"]
    assert "1 of 2 ranks read" in folder["note"] and "worker1.pt.trace.json.gz" in folder["note"]


def test_the_terminal_report_shows_every_file(tmp_path, capsys):
    _rank(tmp_path, 0, 2)
    _truncate(_rank(tmp_path, 1, 2))
    (tmp_path / "notes.txt").write_text("how I ran it")
    assert main(["doctor", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "folder: 3 files (1 not-a-trace, 1 read, 1 unreadable)" in out
    assert "worker1.pt.trace.json.gz: unreadable" in out and "notes.txt: not-a-trace" in out
    assert "1 of 2 ranks read" in out


def test_unrelated_traces_are_refused_with_the_list_of_jobs(tmp_path):
    """Was 'rank 0 of ranks [0, 1, 3, 34], world size 300' with the other files silently ignored."""
    _rank(tmp_path, 34, 300, name="big_job_rank34.json.gz")
    _rank(tmp_path, 3, 8, name="other_job_rank3.json.gz")
    for i in range(3):
        synthetic.write_document(tmp_path / f"single_{i}.json", synthetic.launch_bound(steps=2, ops=20).to_dict())
    with pytest.raises(UnreadableInput) as err:
        diagnose(tmp_path)
    msg = str(err.value)
    assert "holds the traces of 5 different jobs" in msg and "\n" not in msg
    assert "world size 300, rank 34: big_job_rank34.json.gz" in msg and "world size 8, rank 3" in msg
    assert main(["doctor", str(tmp_path)]) == 2


def test_one_job_and_strays_is_the_job_and_the_strays_are_named(tmp_path):
    for r in range(4):
        _rank(tmp_path, r, 4)
    synthetic.write_document(tmp_path / "yesterday.json", synthetic.launch_bound(steps=2, ops=20).to_dict())
    folder = diagnose(tmp_path).source["folder"]
    assert folder["ranks_read"] == [0, 1, 2, 3] and folder["counts"] == {"read": 4, "other-job": 1}
    stray = next(f for f in folder["files"] if f["status"] == "other-job")
    assert stray["path"].endswith("yesterday.json") and "world size 1, not 4" in stray["reason"]


def test_two_runs_of_one_job_are_two_jobs(tmp_path):
    """Same world size, same ranks, an hour apart: not one world of four ranks, nor the newest file per rank."""
    for r in range(2):
        _rank(tmp_path, r, 2, name=f"run1_rank{r}.json.gz")
        _rank(tmp_path, r, 2, start_us=1_000_000.0 + 3600e6, name=f"run2_rank{r}.json.gz")
    with pytest.raises(UnreadableInput, match="2 different jobs"):
        kineto.load_ranks(tmp_path)
    _rank(tmp_path, 0, 2, start_us=1_000_000.0 + 7200e6, name="run3_rank0.json.gz")  # a third, partial run
    with pytest.raises(UnreadableInput, match="3 different jobs"):
        kineto.load_ranks(tmp_path)


def test_a_late_second_trace_of_a_rank_is_a_duplicate(tmp_path):
    for r in range(4):
        _rank(tmp_path, r, 4)
    _rank(tmp_path, 2, 4, start_us=1_000_000.0 + 3600e6, name="worker2_again.json.gz")
    folder = kineto.load_folder(tmp_path)
    assert [t.rank for t in folder.traces] == [0, 1, 2, 3]
    dup = next(f for f in folder.files if f.status == "duplicate-rank")
    assert dup.path.endswith("worker2_again.json.gz") and "a second trace of rank 2" in dup.reason


def test_the_real_eight_rank_folder_reads_every_rank():
    path = REAL / "param_dlrm_v100_8rank"
    if not path.is_dir():
        pytest.skip("real traces not available")
    folder = diagnose(path).source["folder"]
    assert folder["ranks_read"] == list(range(8)) and folder["counts"] == {"read": 8} and folder["missing_ranks"] == []


def test_the_peer_trace_collection_is_no_job():
    if not PEER.is_dir():
        pytest.skip("peer traces not available")
    with pytest.raises(UnreadableInput, match="14 different jobs"):
        diagnose(PEER)
