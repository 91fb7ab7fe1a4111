"""The evidence cache (puzzles/engine/evidence_cache.py): a second `run --replay` reads no trace, and a changed
recording, saved ceilings or perflab version is computed again."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from perflab.puzzles.engine import evidence_cache, replay
from perflab.puzzles.engine import catalog


@pytest.fixture()
def recording(tmp_path):
    src = catalog.get("host-sync").artifacts
    dst = tmp_path / "rec"
    shutil.copytree(src, dst)
    return dst


def test_second_summary_reads_no_trace(recording, monkeypatch):
    first = replay.Evidence(recording).summary("slow")
    monkeypatch.setattr(replay, "load_trace", lambda path: pytest.fail("read the trace again"))
    assert replay.Evidence(recording).summary("slow") == first


def test_changed_content_or_version_or_ceilings_is_recomputed(recording, monkeypatch, tmp_path):
    calls = []

    def make():
        calls.append(1)
        return {"n": len(calls)}

    paths = [recording / "slow.trace.json.gz"]
    assert evidence_cache.cached("x", paths, make) == {"n": 1}
    assert evidence_cache.cached("x", paths, make) == {"n": 1}
    (recording / "slow.trace.json.gz").write_bytes(b"other")
    assert evidence_cache.cached("x", paths, make) == {"n": 2}
    (recording / "ceilings.json").write_text("{}")   # measured ceilings beside the recording: the doctor reads them
    assert evidence_cache.cached("x", paths, make) == {"n": 3}
    monkeypatch.setattr("perflab.__version__", "9.9.9")
    assert evidence_cache.cached("x", paths, make) == {"n": 4}


def test_values_that_do_not_round_trip_are_not_cached(recording):
    calls = []

    def make():
        calls.append(1)
        return {"t": (1, 2)}  # a tuple would come back a list

    for _ in range(2):
        assert evidence_cache.cached("y", [recording], make) == {"t": (1, 2)}
    assert len(calls) == 2


def test_corrupt_entry_is_recomputed(recording):
    assert evidence_cache.cached("z", [recording], lambda: [1]) == [1]
    for f in Path(evidence_cache._entry("0" * 40)).parents[1].rglob("*.json"):
        f.write_text("{not json")
    assert evidence_cache.cached("z", [recording], lambda: [2]) == [2]
