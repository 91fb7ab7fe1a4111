"""What a small file may become while it is read (trace/read_limits.py): a gzip past the decompressed-size limit and
JSON past the depth limit are one line naming the setting that raises them; whitespace, however much, costs no
memory beyond what the events need, on the C scanner's path and msgspec's alike; a pipe is refused before it is
opened."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import pytest

from conftest import cli_run
from perflab.errors import UnreadableInput
from perflab.trace import kineto
from perflab.trace.builders import synthetic

SRC = Path(__file__).resolve().parents[2] / "src"


def _gzip_with_spaces(path: Path, head: bytes, spaces: int, tail: bytes) -> Path:
    co = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = b" " * (4 << 20)
    with open(path, "wb") as fh:
        fh.write(co.compress(head))
        for _ in range(spaces // len(chunk)):
            fh.write(co.compress(chunk))
        fh.write(co.compress(tail) + co.flush())
    return path


def test_a_gzip_bomb_stops_at_the_limit_with_the_setting_named(capsys, tmp_path, monkeypatch):
    bomb = _gzip_with_spaces(tmp_path / "bomb.json.gz", b'{"traceEvents":[', 96 << 20, b"]}")
    assert bomb.stat().st_size < 200_000  # 96 MiB of JSON in a small file
    monkeypatch.setenv("PERFLAB_MAX_DECOMPRESSED", "16M")
    rc, out, err = cli_run(capsys, "doctor", bomb)
    assert rc == 2 and err.count("\n") == 1, err
    assert "decompresses to more than 16.0 MiB" in err and "PERFLAB_MAX_DECOMPRESSED=" in err
    monkeypatch.delenv("PERFLAB_MAX_DECOMPRESSED")  # the default: 200x the size on disk, at least 64 MiB
    with pytest.raises(UnreadableInput, match="decompresses to more than 64.0 MiB"):
        kineto.load(bomb)
    monkeypatch.setenv("PERFLAB_MAX_DECOMPRESSED", "banana")
    rc, _, err = cli_run(capsys, "doctor", bomb)
    assert rc == 2 and "PERFLAB_MAX_DECOMPRESSED='banana': give a positive number" in err


@pytest.mark.parametrize("native", ["1", "0"])
def test_whitespace_costs_no_memory(tmp_path, monkeypatch, native):
    """96 MiB of spaces, allowed by the setting: read in a few MiB (the old reader grew its buffer to hold them),
    and the array of spaces is an empty trace, not an error about memory."""
    monkeypatch.setenv("PERFLAB_NATIVE", native)
    monkeypatch.setenv("PERFLAB_MAX_DECOMPRESSED", "1G")
    bomb = _gzip_with_spaces(tmp_path / "bomb.json.gz", b'{"traceEvents":[', 96 << 20, b"]}")
    tracemalloc.start()
    try:
        with pytest.raises(UnreadableInput, match="no events"):
            kineto.load(bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, peak


def _spaced(doc: dict, spaces: int) -> bytes:
    """The document with a run of spaces between two events, inside one event and after the array."""
    events = [json.dumps(e).encode() for e in doc["traceEvents"]]
    middle = len(events) // 2
    pad = b" " * spaces
    events[middle] = events[middle].replace(b'"name":', b'"name":' + pad, 1)
    body = b"," .join(events[:middle]) + b"," + pad + b",".join(events[middle:])
    meta = {k: v for k, v in doc.items() if k != "traceEvents"}
    return b'{"traceEvents":[' + body + b"]" + pad + b"," + json.dumps(meta).encode()[1:]


def test_whitespace_inside_the_events_reads_the_same_on_both_paths(tmp_path, monkeypatch):
    doc = synthetic.host_bound(steps=3).to_dict()
    compact = tmp_path / "compact.json"
    compact.write_text(json.dumps(doc))
    spaced = tmp_path / "spaced.json.gz"
    spaced.write_bytes(gzip.compress(_spaced(doc, 64 << 20), 6))
    monkeypatch.setenv("PERFLAB_MAX_DECOMPRESSED", "1G")
    got = {}
    for native in ("1", "0"):
        monkeypatch.setenv("PERFLAB_NATIVE", native)
        tracemalloc.start()
        try:
            got[native] = kineto.load(spaced)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 48 << 20, (native, peak)  # each run of spaces is 64 MiB
    want = kineto.load(compact)
    for t in got.values():
        assert t.names == want.names and t.cats == want.cats
        for col in ("ts", "dur", "kind", "name", "correlation", "stream"):
            np.testing.assert_array_equal(getattr(t, col), getattr(want, col))
        assert t.meta["device_properties"] == want.meta["device_properties"]


def test_a_string_holding_spaces_keeps_them(tmp_path, monkeypatch):
    """Only whitespace between tokens is shortened: a name of spaces is a name."""
    doc = synthetic.host_bound(steps=3).to_dict()
    name = "gemm" + " " * (1 << 20) + "kernel"
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            e["name"] = name
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    for native in ("1", "0"):
        monkeypatch.setenv("PERFLAB_NATIVE", native)
        t = kineto.load(path, block_size=1 << 20)
        assert any(n.startswith("gemm" + " " * 1000) for n in t.names)
        assert t.full_names and name in t.full_names.values()


def _deep(levels: int) -> str:
    return ('{"traceEvents":[{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1,"dur":1,"args":{"x":'
            + "[" * levels + "]" * levels + "}}]}")


def test_deep_nesting_is_one_line_naming_the_setting(capsys, tmp_path, monkeypatch):
    deep = tmp_path / "deep.json"
    deep.write_text(_deep(100_000))
    rc, _, err = cli_run(capsys, "doctor", deep)
    assert rc == 2 and err.count("\n") == 1, err
    assert "nested more than 512 levels" in err and "PERFLAB_MAX_JSON_DEPTH=" in err
    listed = tmp_path / "list.json"  # args a list: the loose decoder's path
    listed.write_text(_deep(100_000).replace('"args":{"x":', '"args":').replace("]}}]}", "]}]}"))
    rc, _, err = cli_run(capsys, "doctor", listed)
    assert rc == 2 and "PERFLAB_MAX_JSON_DEPTH" in err, err
    serving = tmp_path / "serving.json"
    serving.write_text('{"median_ttft_ms": ' + "[" * 100_000 + "]" * 100_000 + "}")
    rc, _, err = cli_run(capsys, "doctor", serving)
    assert rc == 2 and "PERFLAB_MAX_JSON_DEPTH" in err and err.count("\n") == 1, err


def test_the_depth_setting_raises_the_limit(tmp_path, monkeypatch):
    deep = tmp_path / "deep.json"
    deep.write_text(_deep(1500))
    with pytest.raises(UnreadableInput, match="nested more than 512 levels"):
        kineto.load(deep)
    monkeypatch.setenv("PERFLAB_MAX_JSON_DEPTH", "3000")
    assert kineto.load(deep).names == ["a"]


def test_a_pipe_is_refused_before_it_is_opened(tmp_path):
    """A FIFO with no writer: opening it would wait forever; one line at once instead."""
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    for args in (["doctor", str(fifo)], ["sql", str(fifo), "SELECT 1"], ["stats", str(fifo)],
                 ["memory", "convert", str(fifo), str(tmp_path / "m.json")]):
        done = subprocess.run([sys.executable, "-m", "perflab", *args], env=env, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, (args, done.stderr)
        assert "is a FIFO (a pipe), not a file" in done.stderr and "save it to a file first" in done.stderr
    assert not (tmp_path / "m.json").exists()


def test_the_depth_setting_has_a_ceiling_below_a_stack_overflow(capsys, tmp_path, monkeypatch):
    deep = tmp_path / "deep.json"
    deep.write_text(_deep(100_000))
    monkeypatch.setenv("PERFLAB_MAX_JSON_DEPTH", "200000")  # would overflow the C stack (a segfault), not refuse
    rc, _, err = cli_run(capsys, "doctor", deep)
    assert rc == 2 and "at most 10000" in err and err.count("\n") == 1, err
