"""The Kineto reader: formats, ranks, metadata, the streaming cutter, and bad input."""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import numpy as np
import pytest

from perflab.errors import UnreadableInput
from perflab.trace import kineto
from perflab.trace.builders import synthetic
from perflab.trace.model import KERNEL, MEMCPY, RUNTIME
from perflab.trace.sniff import KINETO, MEMORY, NCU, NCU_CSV, UNKNOWN, sniff

PEER = Path(os.environ.get("PERFLAB_PEER_TRACES", Path(__file__).resolve().parents[3] / "shared" / "peer-traces" / "hta"))
COLUMNS = ("ts", "dur", "name", "kind", "cat", "tid", "stream", "device", "correlation", "external_id",
           "nbytes", "grid", "block", "shape", "dtype")


def kernel(name="k", ts=100.0, dur=5.0, corr=1, stream=7, **args):
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": stream, "correlation": corr, "grid": [4, 2, 1], "block": [128, 1, 1],
                     **args}}


def launch(ts=90.0, dur=5.0, corr=1):
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts,
            "dur": dur, "args": {"correlation": corr}}


def same_columns(a, b) -> bool:
    return all(np.array_equal(getattr(a, c), getattr(b, c), equal_nan=True) for c in COLUMNS) \
        and a.names == b.names and a.meta == b.meta


def test_reads_json_and_gzip_alike(tmp_path):
    doc = synthetic.document([launch(), kernel()], rank=3, world_size=4)
    a = kineto.load(synthetic.write_document(tmp_path / "t.json", doc))
    b = kineto.load(synthetic.write_document(tmp_path / "t.json.gz", doc))
    assert a.meta.pop("path") != b.meta.pop("path")
    assert len(a) == 2 and same_columns(a, b)
    assert a.rank == 3 and a.meta["world_size"] == 4 and a.meta["device_name"] == synthetic.H100


def test_columns_hold_the_args_the_rules_need(tmp_path):
    copy = {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7,
            "ts": 200, "dur": 10, "args": {"device": 0, "stream": 7, "correlation": 2, "bytes": 4096}}
    t = kineto.load(synthetic.write_document(tmp_path / "t.json", synthetic.document([launch(), kernel(), copy])))
    k = int(np.flatnonzero(t.kind == KERNEL)[0])
    c = int(np.flatnonzero(t.kind == MEMCPY)[0])
    r = int(np.flatnonzero(t.kind == RUNTIME)[0])
    assert (t.grid[k], t.block[k], t.stream[k], t.device[k], t.correlation[k]) == (8, 128, 7, 0, 1)
    assert t.nbytes[c] == 4096 and np.isnan(t.nbytes[k])
    assert t.correlation[r] == 1 and t.stream[r] == -1


def test_string_streams_follow_htas_convention(tmp_path):
    rt = launch()
    rt["args"]["stream"] = "0x0"  # ROCm writes pointers
    t = kineto.load(synthetic.write_document(tmp_path / "t.json", synthetic.document([rt, kernel(stream="9")])))
    assert sorted(t.stream.tolist()) == [-1, 9]


def test_fractional_timestamps_are_flagged_for_hta_rounding(tmp_path):
    ints = kineto.load(synthetic.write_document(tmp_path / "a.json", synthetic.document([kernel(ts=100, dur=3)])))
    frac = kineto.load(synthetic.write_document(tmp_path / "b.json", synthetic.document([kernel(ts=100.5, dur=3)])))
    assert not ints.meta["ts_is_float"] and frac.meta["ts_is_float"]


@pytest.mark.parametrize("block", [1024, 4096, 1 << 16])
def test_block_size_does_not_change_the_result(tmp_path, block):
    b = synthetic.decode_with_item(steps=2, tokens=6)
    doc = b.to_dict()
    doc["traceName"] = "x}],{\"y\": [1,2]}"  # brackets in the text after the events
    path = synthetic.write_document(tmp_path / "t.json", doc)
    assert same_columns(kineto.load(path, block_size=block), kineto.load(path, block_size=64 << 20))


def test_event_boundary_pattern_inside_a_string_is_not_a_cut(tmp_path):
    tricky = kernel(name='weird"}, {"name": "x')
    events = [launch(ts=float(i), corr=i) for i in range(200)] + [tricky]
    path = synthetic.write_document(tmp_path / "t.json", synthetic.document(events))
    t = kineto.load(path, block_size=1024)
    assert len(t) == 201 and 'weird"}, {"name": "x' in t.names


def test_metadata_after_the_events_is_kept(tmp_path):
    doc = {"traceEvents": [kernel()], "deviceProperties": [{"id": 0, "name": "GPU A"}, {"id": 1, "name": "GPU B"}],
           "distributedInfo": {"rank": 5}}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc, indent=2))
    t = kineto.load(path, block_size=1024)
    assert t.rank == 5 and t.meta["device_name"] == "GPU A"


def test_folder_of_ranks_sorted_by_rank(tmp_path):
    for rank in (2, 0, 1):
        synthetic.write_document(tmp_path / f"worker{rank}.pt.trace.json.gz",
                                 synthetic.document([launch(), kernel()], rank=rank, world_size=3))
    (tmp_path / "notes.txt").write_text("not a trace")
    traces = kineto.load_ranks(tmp_path)
    assert [t.rank for t in traces] == [0, 1, 2]


def test_single_file_as_ranks(tmp_path):
    path = synthetic.write_document(tmp_path / "t.json", synthetic.document([kernel()]))
    assert len(kineto.load_ranks(path)) == 1


@pytest.mark.skipif(not PEER.exists(), reason="peer traces not mounted")
def test_every_peer_trace_loads():
    files = sorted(PEER.glob("*.json*"))
    assert len(files) >= 15
    for f in files:
        t = kineto.load(f)
        assert len(t) > 0 and t.meta["path"] == str(f)
    with pytest.raises(UnreadableInput, match="different jobs, not the ranks of one"):
        kineto.load_ranks(PEER)  # fifteen traces of other jobs are no world of ranks


# -- bad input: one clear error, never a traceback --------------------------------------------------
def test_truncated_gzip(tmp_path):
    good = synthetic.write_document(tmp_path / "t.json.gz", synthetic.launch_bound(steps=1, ops=50).to_dict())
    bad = tmp_path / "cut.json.gz"
    bad.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(UnreadableInput, match="complete"):
        kineto.load(bad)


@pytest.mark.parametrize("text, message", [
    ('{"traceEvents": [{"ph": "X", "ts": 1, "dur": 2,', "truncated|complete|invalid"),
    ("{not json at all", "not a Kineto trace|invalid"),
    ('{"schemaVersion": 1, "other": []}', "not a Kineto trace"),
    ('[{"ph": "X"}]', "not a Kineto trace"),
    ('{"traceEvents": []}', "empty"),
    ('{"traceEvents": [{"ph": "M", "name": "process_name"}]}', "empty"),
    ("", "not a Kineto trace|empty"),
])
def test_unreadable_documents(tmp_path, text, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(UnreadableInput, match=message):
        kineto.load(path)


def test_missing_fields_and_nan_degrade(tmp_path):
    events = [
        {"ph": "X", "name": "ok", "ts": 1, "dur": 2, "cat": "cpu_op"},
        {"ph": "X", "name": "no dur", "ts": 1, "cat": "cpu_op"},
        {"ph": "X", "name": "nan", "ts": float("nan"), "dur": 3, "cat": "cpu_op"},
        {"ph": "X", "ts": "12", "dur": None, "args": [1, 2]},
        {"ph": "X", "name": 5, "ts": 3, "dur": 1, "args": {"stream": {"x": 1}, "grid": "big"}},
        "not an event",
    ]
    path = tmp_path / "nan.json"
    path.write_text(json.dumps({"traceEvents": events}))  # json.dumps writes NaN: invalid JSON that Python itself produces
    with pytest.raises(UnreadableInput, match="3 of its 5 events have implausible times"):
        kineto.load(path)  # mostly damaged: refused
    events += [{"ph": "X", "name": "more", "ts": 4 + i, "dur": 1, "cat": "cpu_op"} for i in range(2)]
    path.write_text(json.dumps({"traceEvents": events}))
    t = kineto.load(path)
    assert t.names[t.name[0]] == "ok" and len(t) == 4 and t.meta["dropped_events"] == 3
    assert t.meta["implausible"]["reasons"] == {"no usable start time": 1, "no usable duration": 2}


def test_no_gpu_events_is_a_trace_without_gpu(tmp_path):
    cpu = {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1, "dur": 5}
    t = kineto.load(synthetic.write_document(tmp_path / "t.json", synthetic.document([cpu])))
    assert t.meta["device_name"].startswith("CPU only")


def test_sniff_by_content_not_name(tmp_path):
    trace = synthetic.write_document(tmp_path / "report.ncu-rep", synthetic.document([kernel()]))
    assert sniff(trace) == KINETO
    (tmp_path / "a.bin").write_bytes(b"NVR\x00" + bytes(20))
    (tmp_path / "b.csv").write_text('"ID","Kernel Name","Metric Name","Metric Value"\n')
    (tmp_path / "c.pickle").write_bytes(b"\x80\x04K\x01.")
    (tmp_path / "d.json").write_text('{"segments": [], "device_traces": []}')
    (tmp_path / "e.txt").write_text("hello")
    assert [sniff(tmp_path / n) for n in ("a.bin", "b.csv", "c.pickle", "d.json", "e.txt")] == \
        [NCU, NCU_CSV, MEMORY, MEMORY, UNKNOWN]
    gz = tmp_path / "g.bin"
    gz.write_bytes(gzip.compress(b'{"traceEvents": []}'))
    assert sniff(gz) == KINETO


@pytest.mark.parametrize("native", [False, True], ids=["processes", "threads"])
@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_parallel_reader_matches_the_sequential_one(tmp_path, monkeypatch, suffix, native):
    from perflab.trace.torch_profiler import kineto_native, kineto_parallel

    if native and not kineto_native.available():
        pytest.skip("the C scanner is not built in this install")
    doc = synthetic.decode_with_item(steps=3, tokens=20).to_dict()
    doc["traceEvents"].insert(40, kernel(name='tricky"}, {"ph": "X"'))  # a boundary look-alike in a string
    path = synthetic.write_document(tmp_path / f"t{suffix}", doc)
    monkeypatch.setenv("PERFLAB_NATIVE", "0")     # the reference: msgspec, one process
    sequential = kineto.load(path, block_size=4096)
    monkeypatch.setenv("PERFLAB_NATIVE", "1" if native else "0")
    monkeypatch.setattr(kineto_parallel, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setenv("PERFLAB_READER_PROCESSES", "2")
    parallel = kineto.load(path, block_size=4096)
    assert same_columns(sequential, parallel) and len(parallel) > 1000


@pytest.mark.parametrize("native", [False, True], ids=["processes", "threads"])
def test_parallel_ranges_agree_on_every_cut(tmp_path, monkeypatch, native):
    # without the C scanner worker processes read the ranges; with it, threads of this process
    from perflab.trace.torch_profiler import kineto_native, kineto_parallel

    if native and not kineto_native.available():
        pytest.skip("the C scanner is not built in this install")
    monkeypatch.setenv("PERFLAB_NATIVE", "1" if native else "0")
    path = synthetic.write_document(tmp_path / "t.json", synthetic.launch_bound(steps=2, ops=300).to_dict())
    sequential = kineto.load(path)
    monkeypatch.setattr(kineto_parallel, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setenv("PERFLAB_READER_PROCESSES", "2")
    done = []
    name = "decode_threaded" if native else "decode_parallel"
    real = getattr(kineto, name)

    def counted(*args):
        result = real(*args)  # raises BadCut when it falls back: then it is not counted
        done.append(1)
        return result

    monkeypatch.setattr(kineto, name, counted)
    for per_worker in (1, 3, 17, 200):  # ranges smaller than an event, too
        monkeypatch.setattr(kineto_parallel, "TASKS_PER_WORKER", per_worker)
        assert same_columns(sequential, kineto.load(path))
    assert len(done) == 4  # the parallel reader did the work, no fallback


def test_a_gzip_trace_counts_its_json_toward_the_parallel_threshold(tmp_path):
    # 26 MB of gzip holding 476 MB of JSON must get the second core: the threshold counts decompressed bytes
    from perflab.trace.torch_profiler import kineto_parallel

    doc = synthetic.launch_bound(steps=2, ops=300).to_dict()
    plain = synthetic.write_document(tmp_path / "t.json", doc)
    packed = synthetic.write_document(tmp_path / "t.json.gz", doc)
    assert packed.stat().st_size < plain.stat().st_size
    assert kineto_parallel.json_size(packed) == kineto_parallel.json_size(plain) == plain.stat().st_size
