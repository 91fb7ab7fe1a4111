"""A memory snapshot of several devices is judged on every device, the worst first (issue 24, item 5).

Synthetic snapshots in the layout torch.cuda.memory._snapshot() returns (segments tagged with their device,
one device trace per device; an out-of-memory entry carries the bytes asked for and `device_free`). Before
this change the doctor read device 0 only: an out-of-memory error on device 1 at 78 GiB came out `healthy`.
"""
from __future__ import annotations

import json

from perflab.doctor.memory import diagnose_memory
from perflab.trace.snapshot import from_raw, load

GiB = 2**30
MiB = 2**20
FRAMES = [{"filename": "model.py", "line": 12, "name": "forward"}]


def _segment(device: int, address: int, size: int, allocated: int) -> dict:
    blocks = [{"address": address, "size": allocated, "requested_size": allocated, "state": "active_allocated",
               "frames": FRAMES}]
    if size > allocated:
        blocks.append({"address": address + allocated, "size": size - allocated, "requested_size": 0,
                       "state": "inactive", "frames": []})
    return {"device": device, "address": address, "total_size": size, "allocated_size": allocated,
            "active_size": allocated, "stream": 0, "segment_type": "large", "segment_pool_id": [0, 0],
            "is_expandable": False, "frames": FRAMES, "blocks": blocks}


def _trace(device: int, address: int, sizes: list[int], oom: tuple[int, int] | None = None) -> list[dict]:
    events, t, a = [], 0.0, address
    for s in sizes:
        events += [{"action": "segment_alloc", "addr": a, "size": s, "stream": 0, "time_us": t, "frames": FRAMES},
                   {"action": "alloc", "addr": a, "size": s, "stream": 0, "time_us": t + 1, "frames": FRAMES}]
        a += s
        t += 10
    if oom:
        events.append({"action": "oom", "addr": 0, "size": oom[0], "device_free": oom[1], "stream": 0,
                       "time_us": t, "frames": FRAMES})
    return events


def two_devices(oom_on_1: bool = True) -> dict:
    """Device 0: 8 GiB used as allocated. Device 1: 78 GiB allocated, then a 2 GiB allocation fails."""
    big = [4 * GiB] * 19 + [2 * GiB]
    return {"segments": [_segment(0, 0x1000_0000_0000, 8 * GiB, 8 * GiB)]
            + [_segment(1, 0x2000_0000_0000 + i * 4 * GiB, s, s) for i, s in enumerate(big)],
            "device_traces": [_trace(0, 0x1000_0000_0000, [8 * GiB]),
                              _trace(1, 0x2000_0000_0000, big, (2 * GiB, 300 * MiB) if oom_on_1 else None)],
            "allocator_settings": {}}


def test_an_out_of_memory_on_the_second_device_is_the_top_finding():
    report = diagnose_memory(from_raw(two_devices()))
    top = report.findings[0]
    assert top.id == "memory-capacity" and top.severity == "high"
    assert top.evidence["device"] == 1 and top.evidence["ooms"] == 1
    assert top.evidence["reserved_mb"] == 78 * 1024 and top.evidence["failed_request_mb"] == 2048
    assert top.evidence["device_free_mb"] == 300
    assert top.summary.startswith("device 1: Out of memory")
    assert "healthy" not in [f.id for f in report.findings]
    assert report.analyses["memory"]["worst_first"] == [1, 0]
    assert report.source["devices"] == [0, 1]


def test_every_device_healthy_is_healthy_and_says_how_many(tmp_path):
    path = tmp_path / "two.memory.json"
    path.write_text(json.dumps(two_devices(oom_on_1=False)))
    report = diagnose_memory(load(path))
    assert [f.id for f in report.findings] == ["healthy"]
    assert "each of its 2 devices" in report.findings[0].summary
    # the device holding the most is named first when nothing is worse
    assert report.analyses["memory"]["worst_first"] == [1, 0]


def test_one_device_reads_as_before():
    raw = two_devices()
    raw["segments"] = [s for s in raw["segments"] if s["device"] == 0]
    raw["device_traces"] = raw["device_traces"][:1]
    report = diagnose_memory(from_raw(raw))
    assert [f.id for f in report.findings] == ["healthy"]
    assert report.findings[0].summary.startswith("Memory is used as allocated: the default pool")
    assert "device" not in report.findings[0].evidence


def test_the_summary_shows_the_worst_device():
    summary = diagnose_memory(from_raw(two_devices())).analyses["memory"]
    assert summary["device"] is summary["per_device"]["1"] and summary["devices"] == [0, 1]
