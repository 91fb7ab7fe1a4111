"""The C scanner (trace/torch_profiler/kineto_native.py) against the msgspec path it stands in for: on every block
either both give the same columns, tables and collective records, or both raise the same error; and the scanner
really takes the common blocks (a scanner that declined everything would pass the first check)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perflab.trace.builders import synthetic
from perflab.trace.sniff import open_binary
from perflab.trace.torch_profiler import kineto_native
from perflab.trace.torch_profiler.json_stream import EventStream
from perflab.trace.torch_profiler.kineto_events import ColumnBuilder

pytestmark = pytest.mark.skipif(not kineto_native.available(), reason="the C scanner is not built in this install "
                                "(no C compiler when it was installed) or PERFLAB_NATIVE=0")
SHARED = Path(__file__).resolve().parents[3] / "shared"


def builder(native: bool) -> ColumnBuilder:
    old = os.environ.get("PERFLAB_NATIVE")
    os.environ["PERFLAB_NATIVE"] = "1" if native else "0"
    try:
        return ColumnBuilder()
    finally:
        if old is None:
            del os.environ["PERFLAB_NATIVE"]
        else:
            os.environ["PERFLAB_NATIVE"] = old


def read(blocks: list[bytes], native: bool) -> tuple[object, int]:
    """(the builder's export, or the error's type; how many blocks the scanner took)."""
    b = builder(native)
    taken = 0
    try:
        for raw in blocks:
            if b._native is not None and b._native.add(raw):
                taken += 1
                continue
            b._native, keep = None, b._native   # this block the msgspec way, as add_raw does after a decline
            try:
                b.add_raw(raw)
            finally:
                b._native = keep
    except Exception as exc:  # noqa: BLE001 - the error itself is what is compared
        return type(exc), taken
    return b.export(), taken


def assert_same(a, b, where="") -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, where
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), where
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and a != a:
        assert b != b, where
    else:
        assert a == b, (where, a, b)


def both(events: list | bytes, expect_taken: bool | None = None):
    raw = events if isinstance(events, bytes) else json.dumps(events).encode()
    ref, _ = read([raw], native=False)
    got, taken = read([raw], native=True)
    assert_same(ref, got)
    if expect_taken is not None:
        assert bool(taken) == expect_taken
    return got


def kernel(**over):
    e = {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 100.5, "dur": 3,
         "args": {"device": 0, "stream": 7, "correlation": 9, "grid": [4, 2, 1], "block": [128, 1, 1]}}
    e.update(over)
    return e


def op(**over):
    e = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 90, "dur": 12,
         "args": {"External id": 4, "Input Dims": [[16, 32], [32, 8]], "Input type": ["float", "float"],
                  "Concrete Inputs": ["", ""], "Ev Idx": 3}}
    e.update(over)
    return e


def test_common_events_are_taken_and_read_alike():
    events = [op(), kernel(), op(name="aten::add", args={"External id": 5, "Input Dims": [[[1, 2]], []]}),
              {"ph": "s", "id": 9, "pid": 1, "tid": 1, "ts": 95, "cat": "ac2g", "name": "flow"},
              {"ph": "f", "id": 9, "pid": 0, "tid": 7, "ts": 100.5, "cat": "ac2g", "name": "flow", "bp": "e"},
              {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 7, "ts": 120, "dur": 2,
               "args": {"device": 0, "stream": 7, "correlation": 10, "bytes": 4096, "memory bandwidth (GB/s)": 1.5}},
              {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 96, "dur": 4,
               "args": {"correlation": 9, "cbid": 211}},
              {"ph": "i", "name": "mark", "ts": 1, "pid": 1, "tid": 1, "s": "t"},
              {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
              {"name": "no phase", "ts": 3, "dur": 1},
              kernel(name="ncclDevKernel_AllReduce", args={"device": 0, "stream": 9, "correlation": 11,
                     "Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems": 1024,
                     "Group size": 2, "dtype": "Float", "Process Group Ranks": [0, 1], "grid": [2], "block": [64]}),
              op(name="nccl:all_reduce", cat="user_annotation", args={"Input Dims": [[8, 8]], "Input type": ["float"]}),
              kernel(args={"Collective name": None, "grid": None, "block": []}),
              {"ph": "X", "cat": "cpu_op", "name": "no args", "ts": 4, "dur": 1, "tid": 2},
              # args where their kind does not read them: each column keeps its default there
              op(name="aten::copy_", args={"correlation": 3, "device": 1, "bytes": 8, "grid": [1], "stream": 2,
                                           "external id": 6}),
              {"ph": "X", "cat": "user_annotation", "name": "step", "ts": 1, "dur": 50, "tid": 1,
               "args": {"correlation": 4, "External id": 12, "Input Dims": [[1]]}},
              {"ph": "X", "cat": "python_function", "name": "f.py(1): g", "ts": 1, "dur": 5, "tid": 1,
               "args": {"correlation": 4, "Python id": 3}},
              kernel(args={"external id": 21, "device": 0, "correlation": 13, "bytes": 5}),   # Kineto of 2021
              kernel(args={"External id": 22, "external id": 23, "correlation": 14, "Input Dims": [[2]]}),
              {"ph": "X", "cat": "gpu_memset", "name": "Memset", "ts": 130, "dur": 1, "tid": 7,
               "args": {"device": 0, "stream": 7, "correlation": 15, "bytes": 64, "external id": 24}}]
    got = both(events, expect_taken=True)
    assert len(got["comm"]) == 2 and got["n_events"] == len(events)


@pytest.mark.parametrize("name", ['quote " inside', "back\\slash", "caf\u00e9 \u6f22\u5b57", "tab\there", "",
                                  "x" * 100_000])
def test_names_with_escapes_and_unicode(name):
    both([op(name=name), kernel(name=name), op(name="plain")], expect_taken=True)


def test_an_escaped_and_a_plain_spelling_are_one_name():
    raw = (b'[{"ph":"X","cat":"cpu_op","name":"caf\\u00e9","ts":1,"dur":1},'
           b'{"ph":"X","cat":"cpu_op","name":"caf\xc3\xa9","ts":2,"dur":1}]')
    got = both(raw, expect_taken=True)
    assert got["names"] == ["caf\u00e9"]


@pytest.mark.parametrize("value", [1669783687464181.123, 1.5e3, -0.0, 0.1, 123456789012345.0, 1e-7, 17])
def test_times_read_as_msgspec_reads_them(value):
    both([op(ts=value, dur=value), kernel(ts=value)], expect_taken=True)


@pytest.mark.parametrize("tid", ["PyTorch Profiler (0)", "12", " 7 ", "stream 7", -3])
def test_thread_ids_of_every_spelling(tid):
    both([op(tid=tid), kernel(tid=tid), op(tid=tid, name="again")], expect_taken=True)


@pytest.mark.parametrize("event", [
    op(ts="123"), op(args=None), op(tid=1.5), kernel(args={"grid": [1.5, 2]}), op(id="7"),
    kernel(args={"stream": "7"}), kernel(args={"Collective name": 5}), kernel(args={"dtype": 5}),
    kernel(args={"In msg nelems": [1]}), op(ts=2 ** 70), kernel(args={"grid": [2 ** 40, 2 ** 30]}),
    kernel(args={"grid": [-1, 2]}), op(name=7), op(ph=None), op(dur=None),
], ids=lambda e: json.dumps(e)[:60])
def test_unusual_types_are_left_to_msgspec(event):
    both([op(), event], expect_taken=False)


@pytest.mark.parametrize("raw", [
    b'[{"ph":"X","name":"a","name":"b","ts":1,"dur":1}]',              # a duplicated field
    b'[{"ph":"X","na\\u006de":"a","ts":1,"dur":1}]',                    # an escaped key
    b'[{"ph":"X","name":"\\ud83d\\ude00","ts":1,"dur":1}]',             # a surrogate pair
    b'[{"ph":"X","name":"a","ts":1,"dur":1,"args":{"deep":' + b"[" * 300 + b"]" * 300 + b"}}]",
    b'[1, 2]',
])
def test_what_the_scanner_declines_still_reads_alike(raw):
    both(raw, expect_taken=False)


@pytest.mark.parametrize("raw", [
    b'[{"ph":"X","ts":1,},]', b'[{"ph":"X","ts":01}]', b'[{"ph":"X","ts":1.}]', b'[{"ph":"X","ts":-}]',
    b'[{"ph":"X","ts":NaN}]', b'[{"ph":"X","name":"a\x01b"}]', b'[{"ph":"X","name":"\xff"}]',
    b'[{"ph":"X","name":"a\\x"}]', b'[{"ph":"X"', b'[{"ph":"X"}] x', b'[{"ph" "X"}]', b'[{"ph":"X"}{"ph":"X"}]',
    b'[{"ph":"X","args":{"a":tru}}]', b'[{"ph":"X","ts":1e}]',
])
def test_invalid_json_raises_as_before(raw):
    got = both(raw, expect_taken=False)
    assert got in (msgspec.DecodeError, UnicodeDecodeError)


def _base_block() -> bytes:
    doc = synthetic.decode_with_item(steps=1, tokens=3).to_dict()
    return json.dumps(doc["traceEvents"][:60], indent=1).encode()


BASE = _base_block()
ALPHABET = b'{}[],:"\\ 0123456789.-eE+truefalsn\n\t\x01\xc3\xa9\xff'


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_blocks_read_alike(data):
    raw = bytearray(BASE)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(raw) - 1))
        what = data.draw(st.sampled_from(["replace", "delete", "insert"]))
        byte = ALPHABET[data.draw(st.integers(0, len(ALPHABET) - 1))]
        if what == "replace":
            raw[at] = byte
        elif what == "delete":
            del raw[at]
        else:
            raw.insert(at, byte)
    both(bytes(raw))


def test_the_unmutated_base_is_taken():
    both(BASE, expect_taken=True)


def _traces() -> list[Path]:
    return sorted([*SHARED.glob("peer-traces/hta/*.json.gz"), *SHARED.glob("real-traces/*.json.gz")])


@pytest.mark.skipif(not _traces(), reason="../shared is absent")
@pytest.mark.parametrize("block_size", [1 << 16, 4 << 20])
def test_every_real_trace_reads_alike(block_size):
    taken = total = 0
    for path in _traces():
        with open_binary(path) as fh:
            blocks = list(EventStream(fh, block_size).blocks(bytes))
        ref, _ = read(blocks, native=False)
        got, n = read(blocks, native=True)
        assert_same(ref, got, path.name)
        taken, total = taken + n, total + len(blocks)
    assert taken >= 0.9 * total  # real traces are the common case the scanner is for
