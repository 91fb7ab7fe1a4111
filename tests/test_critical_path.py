"""Issue 27: the step's critical path on traces with several streams (analysis/critical_path.py)."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from perflab.analysis.critical_path import critical_path
from perflab.trace.kineto import load

PEER = Path(__file__).parents[2] / "shared" / "peer-traces" / "hta"


def _trace(tmp_path, events):
    path = tmp_path / "t.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    return load(path)


def _ev(cat, name, ts, dur, tid, **args):
    pid = 0 if cat == "kernel" else 1
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _two_streams(tmp_path, long_on_side: bool = False):
    """Host launches a long kernel on stream 7 and a short one on stream 8 that runs wholly under it, then
    synchronizes the device."""
    a_us, b_us = (200.0, 1000.0) if long_on_side else (1000.0, 200.0)
    return _trace(tmp_path, [
        _ev("cuda_runtime", "cudaLaunchKernel", 1000.0, 5.0, 1, correlation=1),
        _ev("cuda_runtime", "cudaLaunchKernel", 1010.0, 5.0, 1, correlation=2),
        _ev("kernel", "long_a", 1010.0, a_us, 7, stream=7, device=0, correlation=1),
        _ev("kernel", "short_b", 1100.0, b_us, 8, stream=8, device=0, correlation=2),
        _ev("cuda_runtime", "cudaDeviceSynchronize", 1020.0, 1200.0, 1),
    ])


def _rows(t, name):
    return [int(r) for r in np.flatnonzero(t.kind == 4) if t.names[t.name[r]] == name]


def test_a_kernel_wholly_overlapped_by_another_stream_saves_nothing(tmp_path):
    t = _two_streams(tmp_path)
    cp = critical_path(t)
    assert cp.saving_us(_rows(t, "short_b"), t) == 0.0
    assert cp.saving_us(_rows(t, "long_a"), t) == pytest.approx(1000.0)
    assert cp.by_lane["stream 7"] == pytest.approx(1000.0)
    assert "stream 8" not in cp.by_lane


def test_the_chain_follows_whichever_stream_ends_last(tmp_path):
    t = _two_streams(tmp_path, long_on_side=True)
    cp = critical_path(t)
    assert cp.saving_us(_rows(t, "long_a"), t) == 0.0
    assert cp.saving_us(_rows(t, "short_b"), t) == pytest.approx(1000.0)
    assert cp.to_dict()["by_lane_us"]["stream 8"] == pytest.approx(1000.0)


@pytest.mark.skipif(not PEER.is_dir(), reason="HTA's sample traces are not here")
def test_hta_event_sync_sample_ends_on_the_kernel_the_device_sync_waits_for():
    t = load(PEER / "critical_path__cuda_event_sync_multi_stream__event_sync_trace.json.gz")
    cp = critical_path(t)
    names = [t.names[t.name[r]] for r in cp.rows]
    assert names[-1] == "cudaDeviceSynchronize" and "sgemm" in names[-2]
    assert any(k.startswith("stream") for k in cp.by_lane)
