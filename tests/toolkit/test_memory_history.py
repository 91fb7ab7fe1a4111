"""The allocator's history in the profiled run (toolkit/memory_history.py), the order of its calls into torch: on at
CUDA's start with Python stacks, stacks left out while the profiler records and back after, dumped at exit only when
kept. CUDA is not here: a recorder stands in for torch.cuda and keeps the calls (tests/gpu/test_investigate_gpu.py
runs the real allocator)."""
from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from perflab.toolkit.memory_history import History, QuietWhileRecording


class CudaCalls:
    def __init__(self):
        self.calls: list[tuple] = []
        self.memory = SimpleNamespace(_record_memory_history=self.record, _dump_snapshot=self.dump)

    def is_available(self):
        return True

    def _lazy_call(self, fn):
        fn()

    def record(self, enabled="all", context="all", stacks="all", max_entries=None):
        self.calls.append(("record", enabled, context))

    def dump(self, path):
        self.calls.append(("dump", path))


class Session:
    done = False

    def begin(self, first_step=0):
        pass

    def step(self):
        self.done = True

    def close(self):
        return None

    def discard(self):
        pass


@pytest.fixture
def cuda(monkeypatch):
    c = CudaCalls()
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(cuda=c))
    return c


NEAR_FULL = {"total_mb": 1000.0, "peak_reserved_mb": 950.0, "num_ooms": 0, "num_alloc_retries": 0, "private_pools": 0}
ROOMY = {**NEAR_FULL, "peak_reserved_mb": 100.0}


def test_stacks_are_left_out_while_the_profiler_records_and_the_snapshot_kept_when_memory_is_short(cuda, tmp_path):
    h = History({"snapshot_dir": str(tmp_path), "keep": "when-needed"})
    h.start(sys.modules["torch"])
    s = QuietWhileRecording(Session(), h)
    s.begin(3)
    s.step()                                     # the last recorded step: the session is done
    out = h.finish(NEAR_FULL)
    assert [c[:3] for c in cuda.calls] == [("record", "all", "all"), ("record", "all", None), ("record", "all", "all"),
                                           ("dump", str(h.path)), ("record", None, "all")]
    assert out["snapshot"] == str(h.path) and out["stacks_left_out_while_profiling"]


def test_nothing_is_dumped_when_memory_is_roomy_unless_asked(cuda, tmp_path):
    h = History({"snapshot_dir": str(tmp_path), "keep": "when-needed"})
    h.start(sys.modules["torch"])
    assert h.finish(ROOMY)["snapshot"] is None and not any(c[0] == "dump" for c in cuda.calls)
    always = History({"snapshot_dir": str(tmp_path), "keep": "always"})
    always.start(sys.modules["torch"])
    assert always.finish(ROOMY)["snapshot"] == str(always.path)


def test_a_discarded_recording_gives_the_stacks_back(cuda, tmp_path):
    h = History({"snapshot_dir": str(tmp_path)})
    h.start(sys.modules["torch"])
    s = QuietWhileRecording(Session(), h)
    s.begin(0)
    s.discard()
    assert [c[2] for c in cuda.calls] == ["all", None, "all"]
