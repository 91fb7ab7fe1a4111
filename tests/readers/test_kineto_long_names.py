"""A name's length does not set the cost: three distinct 1 MB op names cost doctor, stats and diff what short
names do (the reader holds a long name once, in full, and gives the analyses a bounded table entry)."""
from __future__ import annotations

import time

import pytest

from perflab.__main__ import main
from perflab.trace.builders import synthetic
from perflab.trace.kineto import load
from perflab.trace.model import NAME_LIMIT

MB = 1 << 20


def _write(path, size: int):
    b = synthetic.launch_bound(steps=5, ops=200)
    long = [(c * size)[:size] for c in "abc"]
    ops = [e for e in b.events if e.get("cat") in ("kernel", "cpu_op")][:3]
    for e, name in zip(ops, long):
        e["name"] = name + e["name"]
    synthetic.write_document(path, synthetic.document(b.events))
    return path


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("names")
    return _write(d / "short.json", 100), _write(d / "long.json", MB)


def test_long_names_are_held_once_in_full_and_bounded_in_the_table(traces):
    t = load(traces[1])
    assert max(map(len, t.names)) < NAME_LIMIT + 100
    assert len(t.full_names) == 3 and all(len(n) > MB for n in t.full_names.values())
    assert len({t.names[i] for i in t.full_names}) == 3            # distinct names stay distinct
    row = int(next(r for r in range(len(t)) if int(t.name[r]) in t.full_names))
    assert t.full_name_of(row) == t.full_names[int(t.name[row])] and t.name_of(row) != t.full_name_of(row)
    assert t.meta["long_names"] == 3
    short = load(traces[0])
    assert short.full_names == {} and short.meta["long_names"] == 0


def _cpu(args, capsys) -> float:
    t0 = time.process_time()
    assert main(args) == 0
    capsys.readouterr()
    return time.process_time() - t0


@pytest.mark.parametrize("command", [["doctor", "--json"], ["stats"], ["diff"]])
def test_a_1mb_name_costs_what_a_short_one_does(command, traces, capsys):
    short, long = map(str, traces)

    def args(path):
        return [*command, short, path] if command == ["diff"] else [*command, path]

    _cpu(args(short), capsys)   # imports and first-use caches out of the measurement
    base = min(_cpu(args(short), capsys) for _ in range(2))
    cost = min(_cpu(args(long), capsys) for _ in range(2))
    # before the reader bounded long names, the doctor took ~15x the short trace's time on these three names
    assert cost < 3 * base + 0.2, (cost, base)


def test_a_report_naming_a_1mb_op_is_the_size_of_one_naming_a_short_one(traces, capsys):
    import json

    sizes = []
    for path in map(str, traces):
        assert main(["doctor", path, "--json"]) == 0
        out = capsys.readouterr().out
        sizes.append(len(out))
        assert max(len(s) for s in _strings(json.loads(out))) < 4096
    assert sizes[1] < 1.5 * sizes[0], sizes


def _strings(doc):
    if isinstance(doc, dict):
        for v in doc.values():
            yield from _strings(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from _strings(v)
    elif isinstance(doc, str):
        yield doc
