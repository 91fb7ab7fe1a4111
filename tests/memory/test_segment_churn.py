"""A memory snapshot read through its history: segments the caching allocator gives back to the driver and takes
again inside the recorded window are `allocator-churn`, with counts, bytes, streams and the frames that caused
them (analysis/gpu_memory/segment_churn.py, doctor/rules/memory.py). Snapshots are built here in the format
torch.cuda.memory._dump_snapshot writes (segments, device_traces of alloc / free_requested / free_completed /
segment_alloc / segment_free entries with addr, size, stream, time_us, frames), as JSON and as a pickle."""
from __future__ import annotations

import json
import pickle

import pytest

from perflab.doctor.memory import diagnose_memory

MB = 2**20
LOAD = [{"filename": "/usr/lib/python3/site-packages/torch/cuda/memory.py", "line": 224, "name": "empty"},
        {"filename": "/srv/offload/loader.py", "line": 31, "name": "load_layer"}]
EMPTY = [{"filename": "/usr/lib/python3/site-packages/torch/cuda/memory.py", "line": 224, "name": "empty_cache"},
         {"filename": "/srv/offload/loader.py", "line": 40, "name": "unload_layer"}]


def offload_history(layers=64, size_mb=256, streams=(7, 9), call_us=150.0, compute_us=900.0, times=True,
                    empty_cache=False):
    """An offloaded model's loop: every layer's weights get a fresh segment on the layer's stream, are used, freed
    and the segment given back before the next layer (memory too short to keep one per stream)."""
    trace, t = [], 0.0

    def ev(action, addr, size, stream, frames):
        nonlocal t
        e = {"action": action, "addr": addr, "size": size, "stream": stream, "frames": frames}
        if times:
            e["time_us"] = t
        trace.append(e)

    for i in range(layers):
        addr, s = (1 << 40) + i * (size_mb * MB), streams[i % len(streams)]
        t += call_us
        ev("segment_alloc", addr, size_mb * MB, s, LOAD)
        t += 5
        ev("alloc", addr, size_mb * MB, s, LOAD)
        t += compute_us
        ev("free_requested", addr, size_mb * MB, s, LOAD)
        ev("free_completed", addr, size_mb * MB, s, LOAD)
        t += call_us
        ev("segment_free", addr, size_mb * MB, s, EMPTY if empty_cache else LOAD)
    return {"allocator_settings": {}, "segments": [], "device_traces": [trace]}


def growth_history(segments=100):
    """A model loading its weights: every segment taken once and kept (the cache growing to its peak)."""
    trace = [{"action": "segment_alloc", "addr": (1 << 40) + i * 64 * MB, "size": 64 * MB, "stream": 0,
              "time_us": 100.0 * i, "frames": LOAD} for i in range(segments)]
    segs = [{"device": 0, "address": (1 << 40) + i * 64 * MB, "total_size": 64 * MB, "stream": 0,
             "segment_type": "large", "segment_pool_id": [0, 0], "is_expandable": False,
             "blocks": [{"address": (1 << 40) + i * 64 * MB, "size": 64 * MB, "requested_size": 64 * MB,
                         "state": "active_allocated", "frames": LOAD}]} for i in range(segments)]
    return {"allocator_settings": {}, "segments": segs, "device_traces": [trace]}


def write(tmp_path, raw, kind="json"):
    path = tmp_path / f"snapshot.{'pickle' if kind == 'pickle' else 'json'}"
    path.write_bytes(pickle.dumps(raw) if kind == "pickle" else json.dumps(raw).encode())
    return path


@pytest.mark.parametrize("kind", ["json", "pickle"])
def test_segments_given_back_and_taken_again_on_two_streams_are_allocator_churn(tmp_path, kind):
    report = diagnose_memory(write(tmp_path, offload_history(), kind))
    churn = next(f for f in report.findings if f.id == "allocator-churn")
    ev = churn.evidence
    assert (ev["segment_allocs"], ev["segment_frees"], ev["cycled_segments"]) == (64, 64, 64)
    assert ev["allocated_mb"] == ev["freed_mb"] == pytest.approx(64 * 256)
    assert ev["streams"] == 2 and ev["segments_per_stream"] == {"7": 64, "9": 64}
    assert ev["sites"][0] == "loader.py:31 load_layer"
    # each driver call is measured from the history's own clock: a free and the next layer's allocation, with
    # nothing recorded between them, are one call (150 us) apart
    assert ev["driver_call_us_est"] == pytest.approx(150.0) and "back-to-back" in ev["driver_call_basis"]
    assert ev["driver_ms_est"] == pytest.approx(128 * 0.150, rel=0.01)
    assert churn.gain_pct == pytest.approx(100 * 128 * 150 / (ev["window_ms"] * 1e3), abs=0.2)
    assert churn.severity in ("medium", "high") and "2 streams" in churn.summary and "loader.py:31" in churn.summary
    assert report.findings[0].id == "allocator-churn" and not any(f.id == "healthy" for f in report.findings[:1])


def test_back_to_back_driver_calls_price_one_call():
    """empty_cache frees every cached segment in one go: the gap between two frees is one cudaFree (80 us here,
    against 150 us for the 15 hand-overs between layers: the median of the back-to-back gaps)."""
    raw = offload_history(layers=16, empty_cache=True)
    trace = raw["device_traces"][0]
    t = trace[-1]["time_us"]
    for i in range(40):   # forty more segments freed in one empty_cache, 80 us apart
        t += 80.0
        trace.append({"action": "segment_free", "addr": (1 << 44) + i * MB, "size": MB, "stream": 7,
                      "time_us": t, "frames": EMPTY})
    from perflab.trace.snapshot import from_raw
    from perflab.analysis.gpu_memory.segment_churn import segment_churn

    c = segment_churn(from_raw(raw))
    assert c["driver_call_us_est"] == pytest.approx(80.0) and "back-to-back" in c["driver_call_basis"]
    assert c["emptied"] == 16 + 40 and c["cycled_segments"] == 16


def test_a_cache_growing_to_its_peak_is_no_churn(tmp_path):
    report = diagnose_memory(write(tmp_path, growth_history()))
    assert "allocator-churn" not in [f.id for f in report.findings]
    assert report.analyses["memory"]["device"]["segment_churn"]["segment_allocs"] == 100
    assert report.analyses["memory"]["device"]["segment_churn"]["cycled_segments"] == 0


def test_a_one_off_empty_cache_is_no_churn(tmp_path):
    """A graph capture empties the cache once: a few segments back and forth, not a loop's churn."""
    report = diagnose_memory(write(tmp_path, offload_history(layers=4, empty_cache=True)))
    assert "allocator-churn" not in [f.id for f in report.findings]


def test_churn_without_times_is_named_but_not_priced(tmp_path):
    report = diagnose_memory(write(tmp_path, offload_history(times=False)))
    churn = next(f for f in report.findings if f.id == "allocator-churn")
    assert churn.severity == "low" and churn.gain_pct == 0.0 and churn.evidence["cycled_segments"] == 64
    assert "no times" in churn.summary
