"""Implausible times (NaN, inf, negative, not a number, longer than the trace, 1e300) are dropped with a
count and a note in every output: the terminal, --json, --html and the diff. A trace made mostly of them
is refused with one line. Real profiles lose nothing."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import cli_run, retouched_trace
from perflab.doctor import diagnose
from perflab.trace import kineto, sniff
from perflab.trace.builders import synthetic

SHARED = Path(__file__).resolve().parents[3] / "shared"


def damaged(path: Path, values: list) -> Path:
    """A host-bound trace whose first kernels get the given durations."""
    return retouched_trace(path, kernel=lambda ev, i: ev.update(dur=values[i]) if i < len(values) else None)


run = cli_run


def test_a_huge_duration_is_dropped_and_said_everywhere(capsys, tmp_path):
    trace = damaged(tmp_path / "huge.json", [1e300])
    note = "dropped 1 of 193 events with implausible times (1 duration longer than the trace)"
    rc, out, _ = run(capsys, "doctor", trace, "--html", tmp_path / "r.html")
    assert rc == 0 and note in " ".join(out.split())
    assert note in (tmp_path / "r.html").read_text()
    rc, out, _ = run(capsys, "doctor", trace, "--json")
    doc = json.loads(out)
    assert note in doc["source"]["notes"][0]
    summary = doc["analyses"]["summary"]
    assert summary["mean_kernel_us"] < 1e3 and summary["gpu_busy_pct"] <= 100
    assert all(0 <= f["gain_pct"] <= 100 for f in doc["findings"])
    assert doc["findings"][0]["id"] == "host-compute"  # what the undamaged trace says
    from perflab.toolkit.profile import doctor_summary

    assert note in doctor_summary(trace)  # what `perflab profile` prints after its run


def test_nan_negative_and_text_durations_are_counted_not_silent(capsys, tmp_path):
    trace = damaged(tmp_path / "nan.json", [float("nan"), -5.0, "abc", None, "12.5"])
    t = kineto.load(trace)
    assert t.meta["implausible"] == {"dropped": 4, "events": 193,
                                     "reasons": {"no usable duration": 3, "negative duration": 1}}
    assert 12.5 in t.dur  # a number written as text is a number
    clean = damaged(tmp_path / "clean.json", [])
    rc, out, _ = run(capsys, "diff", clean, trace, "--json", "--html", tmp_path / "d.html")
    doc = json.loads(out)
    said = [n for n in doc["notes"] if "dropped 4 of 193 events" in n]
    assert rc == 0 and len(said) == 1 and said[0].startswith(str(trace))
    assert "dropped 4 of 193 events" in (tmp_path / "d.html").read_text()
    rc, out, _ = run(capsys, "diff", clean, trace)
    assert "dropped 4 of 193 events" in " ".join(out.split())


def test_a_trace_made_mostly_of_implausible_times_is_refused(capsys, tmp_path):
    doc = synthetic.host_bound(steps=3).to_dict()
    for ev in doc["traceEvents"][: int(len(doc["traceEvents"]) * 0.8)]:
        if ev.get("ph") == "X":
            ev["dur"] = -1
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    rc, out, err = run(capsys, "doctor", path)
    assert rc == 2 and "events have implausible times (" in err and "negative duration" in err
    assert err.count("\n") == 1 and out == ""


def test_a_step_annotation_may_outlast_the_recording(tmp_path):
    """A ProfilerStep closes at the next step() call, which may come after the profiler stopped (seen in
    HTA's triton example: a 13 s step in a 355 ms trace); a kernel cannot outlast the recording."""
    doc = synthetic.host_bound(steps=2).to_dict()
    step = next(ev for ev in doc["traceEvents"] if str(ev.get("name", "")).startswith("ProfilerStep"))
    step["dur"] = 60e6  # a minute, in a trace of ~25 ms
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    assert kineto.load(path).meta["implausible"]["dropped"] == 0
    next(ev for ev in doc["traceEvents"] if ev.get("cat") == "kernel")["dur"] = 60e6
    path.write_text(json.dumps(doc))
    assert kineto.load(path).meta["implausible"]["reasons"] == {"duration longer than the trace": 1}


def _shared_traces() -> list[Path]:
    roots = [SHARED / "real-traces", SHARED / "peer-traces"]
    found = []
    for root in roots:
        if root.is_dir():
            found += [p for p in sorted(root.rglob("*")) if p.is_file() and sniff.sniff(p) == sniff.KINETO]
    return found


@pytest.mark.skipif(not _shared_traces(), reason="../shared/real-traces and peer-traces not available")
def test_real_profiles_lose_no_event():
    for path in _shared_traces():
        t = kineto.load(path)
        assert t.meta["implausible"]["dropped"] == 0, (path.name, t.meta["implausible"])
        assert "notes" not in diagnose(t).source, path.name
