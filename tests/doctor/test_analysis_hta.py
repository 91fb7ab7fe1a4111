"""HTA 0.5.0's temporal and idle-time breakdowns: same definitions, same numbers.

The expected numbers in tests/data/kineto/hta_expected.json come from running HTA 0.5.0 itself on
the peer traces (benchmarks/doctor_vs_hta.py prints the same comparison live).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from perflab.analysis.reports.hta_breakdown import idle_time_breakdown, temporal_breakdown
from perflab.trace import kineto
from perflab.trace.builders import synthetic

PEER = Path(os.environ.get("PERFLAB_PEER_TRACES", Path(__file__).resolve().parents[3] / "shared" / "peer-traces" / "hta"))
EXPECTED = json.loads((Path(__file__).parents[1] / "data" / "kineto" / "hta_expected.json").read_text())


def _trace(tmp_path, events, name="t.json", **doc):
    return kineto.load(synthetic.write_document(tmp_path / name, synthetic.document(events, **doc)))


def _x(cat, name, ts, dur, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 0 if cat in ("kernel", "gpu_memcpy") else 1,
            "tid": args.get("stream", 1), "ts": ts, "dur": dur, "args": args}


def _kernel(name, ts, dur, corr, stream=7):
    return _x("kernel", name, ts, dur, stream=stream, correlation=corr, device=0)


def _launch(ts, corr, dur=2):
    return _x("cuda_runtime", "cudaLaunchKernel", ts, dur, correlation=corr)


def test_temporal_breakdown_definitions(tmp_path):
    events = [_launch(0, 1), _kernel("gemm", 10, 20, 1), _launch(5, 2), _kernel("Memcpy DtoD", 40, 10, 2),
              _launch(6, 3), _kernel("ncclKernel_AllReduce", 45, 15, 3, stream=20), _launch(7, 4),
              _kernel("relu", 70, 10, 4)]
    (r,) = temporal_breakdown(_trace(tmp_path, events))
    # span 10..80 = 70; busy 10-30, 40-60, 70-80 = 50; compute = gemm + relu = 30
    assert (r["kernel_us"], r["idle_us"], r["compute_us"], r["non_compute_us"]) == (70, 20, 30, 20)
    assert r["idle_pct"] == round(100 * 20 / 70, 2)


def test_fractional_times_are_rounded_inward_like_hta(tmp_path):
    events = [_launch(0, 1), _kernel("a", 10.4, 2.2, 1), _launch(1, 2), _kernel("b", 13.0, 1.0, 2)]
    (r,) = temporal_breakdown(_trace(tmp_path, events))
    # a: ceil(10.4)=11, floor(12.6)=12 ; b: 13..14 -> span 11..14, busy 2
    assert (r["kernel_us"], r["idle_us"]) == (3, 1)


def test_last_profiler_step_is_dropped_when_there_are_several(tmp_path):
    events = []
    for s in range(3):
        base = s * 1000
        events += [_x("user_annotation", f"ProfilerStep#{s}", base, 900), _launch(base + 1, s + 1),
                   _kernel("k", base + 10, 100 if s < 2 else 800, s + 1)]
    (r,) = temporal_breakdown(_trace(tmp_path, events))
    assert r["kernel_us"] == 1110 - 10 and r["idle_us"] == 1100 - 200


def test_idle_categories(tmp_path):
    events = [_launch(0, 1), _kernel("a", 10, 10, 1),        # first kernel: no gap
              _launch(5, 2), _kernel("b", 25, 10, 2),        # gap 5, launched before a ended: kernel wait
              _launch(50, 3), _kernel("c", 60, 10, 3),       # gap 25, launched after b ended: host wait
              _launch(55, 4), _kernel("d", 150, 10, 4)]      # gap 80 >= 30, queued: other
    result = idle_time_breakdown(_trace(tmp_path, events))
    by = {r["category"]: r["idle_us"] for r in result["streams"]}
    assert by == {"kernel_wait": 5, "host_wait": 25, "other": 80}


def test_idle_defaults_to_rank_zero_and_says_when_there_is_none(tmp_path):
    events = [_launch(0, 1), _kernel("a", 10, 10, 1), _launch(30, 2), _kernel("b", 40, 10, 2)]
    r1 = _trace(tmp_path, events, name="r1.json", rank=1)
    r0 = _trace(tmp_path, events, name="r0.json", rank=0)
    assert idle_time_breakdown([r1, r0])["rank"] == 0
    alone = idle_time_breakdown([r1])
    assert alone["rank"] == 1 and "rank 0" in alone["note"]


def test_no_gpu_events_is_an_error_entry(tmp_path):
    t = _trace(tmp_path, [_x("cpu_op", "aten::add", 0, 5)])
    assert "error" in temporal_breakdown(t)[0] and "error" in idle_time_breakdown(t)


def _idle_shares(rows, stream_key, cat_key, value_key):
    totals = {}
    for r in rows:
        totals[r[stream_key]] = totals.get(r[stream_key], 0.0) + r[value_key]
    return {(r[stream_key], r[cat_key]): 100 * r[value_key] / totals[r[stream_key]]
            for r in rows if totals[r[stream_key]]}


@pytest.mark.skipif(not PEER.exists(), reason="peer traces not mounted")
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_agrees_with_hta_on_peer_traces(name):
    expected = EXPECTED[name]
    trace = kineto.load(PEER / name)
    ours = {r["rank"]: r for r in temporal_breakdown(trace)}
    if "temporal" not in expected:
        assert all("error" in r for r in ours.values())
    for r in expected.get("temporal", []):
        o = ours[r["rank"]]
        assert o["kernel_us"] == r["kernel_time(us)"]
        for key in ("idle", "compute", "non_compute"):
            assert abs(o[f"{key}_pct"] - r[f"{key}_time_pctg"]) <= 0.01
    if "idle" in expected:
        ours_idle = idle_time_breakdown(trace, rank=trace.rank)
        mine = _idle_shares(ours_idle["streams"], "stream", "category", "idle_us")
        theirs = _idle_shares(expected["idle"], "stream", "idle_category", "idle_time")
        assert mine.keys() == theirs.keys()
        assert max(abs(mine[k] - theirs[k]) for k in mine) <= 0.5 if mine else True
