"""The evidence cache (puzzles/engine/evidence_cache.py): a second `run --replay` reads no trace, and a changed
recording, saved ceilings or perflab's code is computed again."""
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


def test_changed_content_or_code_or_ceilings_is_recomputed(recording, monkeypatch, tmp_path):
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
    monkeypatch.setattr("perflab.code_stamp.code_stamp", lambda: "other code")  # perflab's code changed
    assert evidence_cache.cached("x", paths, make) == {"n": 4}


def test_the_code_stamp_follows_every_module(tmp_path, monkeypatch):
    import os

    import perflab
    from perflab import code_stamp as stamp

    stamp.code_stamp.cache_clear()
    before = stamp.code_stamp()
    module = os.path.join(os.path.dirname(perflab.__file__), "code_stamp.py")
    st = os.stat(module)
    try:
        os.utime(module, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        stamp.code_stamp.cache_clear()
        assert stamp.code_stamp() != before
    finally:
        os.utime(module, ns=(st.st_atime_ns, st.st_mtime_ns))
        stamp.code_stamp.cache_clear()


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
