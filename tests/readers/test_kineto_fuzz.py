"""Fuzzing the reader (and the doctor behind it): any input gives a Trace or one clear error."""
from __future__ import annotations

import gzip
import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perflab.doctor import diagnose
from perflab.errors import PerflabError, UnreadableInput
from perflab.trace import kineto
from perflab.trace.builders import synthetic

SETTINGS = settings(max_examples=int(__import__("os").environ.get("PERFLAB_FUZZ_EXAMPLES", "60")), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

_BASE = json.dumps(synthetic.decode_with_item(steps=1, tokens=2, layers=2).to_dict()).encode()

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2 ** 70), 2 ** 70) | st.floats(allow_nan=True)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
field_values = st.one_of(json_values, st.sampled_from(["X", "s", "f", "i", "M", "kernel", "cuda_runtime",
                                                       "cpu_op", "gpu_memcpy", "ProfilerStep#1", 7, 1.5]))
args = st.dictionaries(st.sampled_from(["stream", "device", "correlation", "External id", "bytes", "grid",
                                        "block", "Input Dims", "Input type", "other"]), field_values, max_size=5)
events = st.lists(st.fixed_dictionaries({}, optional={
    "ph": field_values, "cat": field_values, "name": field_values, "ts": field_values, "dur": field_values,
    "pid": field_values, "tid": field_values, "id": field_values, "args": st.one_of(args, json_values)}),
    max_size=12)


def _check(trace) -> None:
    n = len(trace)
    assert n > 0
    for column in ("ts", "dur", "kind", "name", "tid", "stream", "correlation", "nbytes", "grid"):
        assert getattr(trace, column).shape == (n,)
    assert np.isfinite(trace.ts).all() and (trace.dur >= 0).all()
    assert trace.name.max() < len(trace.names)


def _load(path):
    try:
        trace = kineto.load(path, block_size=1024)
    except UnreadableInput as exc:
        assert "\n" not in str(exc)
        return None
    _check(trace)
    return trace


@SETTINGS
@given(evs=events, gz=st.booleans())
def test_random_events(tmp_path, evs, gz):
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    data = json.dumps({"traceEvents": evs, "deviceProperties": [{"id": 0, "name": "G"}]}).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    trace = _load(path)
    if trace is not None:
        try:
            diagnose(trace).to_dict()
        except PerflabError:
            pass


@SETTINGS
@given(cut=st.integers(0, len(_BASE)), gz=st.booleans())
def test_truncated_anywhere(tmp_path, cut, gz):
    path = tmp_path / "t.json"
    data = _BASE[:cut]
    path.write_bytes(gzip.compress(data)[: max(cut // 3, 1)] if gz else data)
    _load(path)


@SETTINGS
@given(edits=st.lists(st.tuples(st.integers(0, len(_BASE) - 1), st.binary(min_size=0, max_size=4)),
                      min_size=1, max_size=5))
def test_corrupted_bytes(tmp_path, edits):
    data = bytearray(_BASE)
    for pos, blob in edits:
        data[pos:pos + len(blob)] = blob
    path = tmp_path / "t.json"
    path.write_bytes(bytes(data))
    _load(path)


# ---- implausible values: dropped with a count, never silently; mostly implausible is refused -------------

_HOST_BOUND = synthetic.host_bound(steps=3).to_dict()
_N_COMPLETE = sum(ev.get("ph") == "X" for ev in _HOST_BOUND["traceEvents"])
_KERNELS = [i for i, ev in enumerate(_HOST_BOUND["traceEvents"]) if ev.get("cat") == "kernel"]
implausible = st.sampled_from([float("nan"), float("inf"), float("-inf"), -1.0, -1e9, 1e300, 1e12, "abc", None, [],
                               {"us": 5}])


@SETTINGS
@given(picks=st.lists(st.tuples(st.sampled_from(_KERNELS), implausible), min_size=1, max_size=12,
                      unique_by=lambda p: p[0]),
       field=st.sampled_from(["dur", "ts"]))
def test_implausible_values_are_dropped_counted_and_said(tmp_path, picks, field):
    doc = json.loads(json.dumps(_HOST_BOUND))
    for i, value in picks:
        if field == "ts" and isinstance(value, float) and abs(value) < 1e11:
            value = float("nan")  # a start in range is plausible: only a missing or absurd one counts here
        doc["traceEvents"][i][field] = value
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    trace = kineto.load(path)
    _check(trace)
    info = trace.meta["implausible"]
    assert info["dropped"] == len(picks) and info["events"] == _N_COMPLETE == len(trace) + len(picks)
    assert sum(info["reasons"].values()) == len(picks)
    assert trace.dur.max() <= 2 * (trace.ts.max() - trace.ts.min())
    report = diagnose(trace).to_dict()
    assert f"dropped {len(picks)} of {_N_COMPLETE} events" in " ".join(report["source"]["notes"])
    assert all(0 <= f["gain_pct"] <= 100 for f in report["findings"])


@SETTINGS
@given(value=implausible, share=st.floats(0.55, 1.0))
def test_a_trace_made_mostly_of_implausible_values_is_refused(tmp_path, value, share):
    doc = json.loads(json.dumps(_HOST_BOUND))
    complete = [ev for ev in doc["traceEvents"] if ev.get("ph") == "X"]
    for ev in complete[: max(int(share * len(complete)), len(complete) // 2 + 1)]:
        ev["dur"] = value
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    try:
        kineto.load(path)
    except UnreadableInput as exc:
        assert "implausible times" in str(exc) and "\n" not in str(exc)
    else:
        raise AssertionError("a trace made mostly of implausible events was analysed")
