"""Memory snapshots: reserved memory is judged against the peak allocation over the recorded history (from
what was resident before it), not against the moment of the snapshot, and the report says which baseline."""
from __future__ import annotations

import pickle

from perflab.doctor import diagnose

MB = 2**20
W = [{"filename": "/srv/app/model.py", "line": 5, "name": "load_weights"}]
ACT = [{"filename": "/srv/app/model.py", "line": 51, "name": "block"}]


def _segment(total_mb: int, blocks: list[tuple[int, str]], address: int, pool=(0, 0)) -> dict:
    out, at = [], address
    for size, state in blocks:
        out.append({"address": at, "size": size * MB, "requested_size": size * MB, "state": state,
                    "frames": W if state == "active_allocated" else []})
        at += size * MB
    return {"device": 0, "address": address, "total_size": total_mb * MB, "stream": 0, "segment_type": "large",
            "segment_pool_id": pool, "is_expandable": False, "blocks": out, "frames": []}


def _event(action: str, addr: int, size_mb: float, frames=()) -> dict:
    return {"action": action, "addr": addr, "size": int(size_mb * MB), "stream": 0, "frames": list(frames)}


def _snapshot(tmp_path, reserved_mb: int, *, history: list[dict], reserved_before_history: bool = False,
              name: str = "snap.pickle"):
    """100 MB of weights stay allocated in a segment of `reserved_mb`; `history` is the device trace."""
    base = 1 << 40
    segs = [_segment(reserved_mb, [(100, "active_allocated"), (reserved_mb - 100, "inactive")], base)]
    trace = list(history)
    if not reserved_before_history:  # the segment was reserved during the history, by the peak it served
        trace.insert(0, _event("segment_alloc", base, reserved_mb))
    path = tmp_path / name
    path.write_bytes(pickle.dumps({"segments": segs, "device_traces": [trace]}, protocol=4))
    return path


def _staircase(n: int, size_mb: float, *, freed_together: bool) -> list[dict]:
    """n activations of size_mb allocated one after another above the weights, then freed: all at once, or one
    at a time between allocations (a backward pass freeing activations as it goes)."""
    base = (1 << 40) + 100 * MB
    addrs = [base + int(i * size_mb * MB) for i in range(n)]
    events = [_event("alloc", a, size_mb, ACT) for a in addrs]
    if freed_together:
        return events + [_event("free_completed", a, size_mb) for a in reversed(addrs)]
    scratch = base + int(n * size_mb * MB)
    for a in reversed(addrs):
        events += [_event("free_completed", a, size_mb), _event("alloc", scratch, 1), _event("free_completed", scratch, 1)]
    return events


def test_reserved_memory_that_served_the_peak_is_no_finding(tmp_path):
    """1,020 MB reserved for a 1,000 MB peak (1.02x): was memory-capacity, high, 90 % (against 100 MB allocated)."""
    report = diagnose(_snapshot(tmp_path, 1020, history=_staircase(9, 100.0, freed_together=False)))
    assert report.ids() == ["healthy"]
    base = report.analyses["memory"]["device"]["baseline"]
    assert base["basis"] == "history" and base["baseline_mb"] == 1000 and base["start_allocated_mb"] == 100
    assert "for the peak of 1,000 MB allocated in the default pool over the recorded history" in report.verdict
    assert "100 MB resident before it" in report.verdict


def test_reserved_far_beyond_the_peak_is_memory_capacity_against_the_peak(tmp_path):
    report = diagnose(_snapshot(tmp_path, 4000, history=_staircase(9, 100.0, freed_together=False)))
    f = report.top
    assert f.id == "memory-capacity" and f.evidence["baseline"] == "history"
    assert (f.evidence["reserved_mb"], f.evidence["baseline_mb"], f.evidence["excess_mb"]) == (4000, 1000, 3000)
    assert f.gain_pct == 75.0 and "4.0x its peak (1,000 MB)" in f.summary and "Baseline: the peak of" in f.summary


def test_cache_reserved_before_the_history_is_not_judged_by_it(tmp_path):
    """The history shows a 200 MB peak, but the 4,000 MB were reserved before it began: an earlier peak may explain them."""
    report = diagnose(_snapshot(tmp_path, 4000, history=_staircase(1, 100.0, freed_together=False),
                                reserved_before_history=True))
    assert report.ids() == ["healthy"]
    assert report.analyses["memory"]["device"]["baseline"]["predates_history"]
    assert "an earlier peak may explain the cache" in report.verdict


def test_without_history_the_baseline_is_the_snapshot_and_says_so(tmp_path):
    path = tmp_path / "nohist.pickle"
    path.write_bytes(pickle.dumps({"segments": [_segment(4000, [(1000, "active_allocated"), (3000, "inactive")], 1 << 40)],
                                   "device_traces": [[]]}, protocol=4))
    f = diagnose(path).top
    assert f.id == "memory-capacity" and f.evidence["baseline"] == "snapshot"
    assert "what is allocated at the snapshot" in f.summary and "no allocator history was recorded" in f.summary


def test_temporaries_held_until_freed_together_are_memory_capacity(tmp_path):
    """Inference under autograd: 24 activations of 96 MB allocated block after block, freed all at once."""
    history = _staircase(24, 96.0, freed_together=True)
    report = diagnose(_snapshot(tmp_path, 2460, history=history))
    f = report.top
    assert f.id == "memory-capacity" and f.severity == "high"
    assert f.evidence["held_mb"] == 24 * 96 and f.evidence["allocations"] == 24 and f.evidence["resident_after_mb"] == 100
    assert "model.py:51 block" in f.summary and "inference_mode" in f.fix
    # the same activations freed one by one as they are used up: nothing held
    calm = diagnose(_snapshot(tmp_path, 2460, history=_staircase(24, 96.0, freed_together=False), name="calm.pickle"))
    assert calm.ids() == ["healthy"]
