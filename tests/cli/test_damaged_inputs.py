"""Every damaged input gets one line and exit 2, or, where the input is valid but holds nothing to judge, a verdict
and exit 0, alike in the terminal, --json, --html and through MCP (a real `perflab mcp` process and the SDK's
client)."""
from __future__ import annotations

import gzip
import json
import os
import random
import sqlite3
import sys
from pathlib import Path

import pytest

from conftest import cli_run
from nsys_exports import ExportBuilder
from perflab.trace.builders import synthetic

SRC = Path(__file__).resolve().parents[2] / "src"


def _without_kernels(tmp_path: Path, how: str) -> Path:
    """Copies recorded, kernels not: CUPTI's dropped kernel records, or every kernel record invalid."""
    doc = synthetic.pageable_inputs(steps=3).to_dict()
    if how == "dropped":
        doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "kernel"]
    else:
        doc["traceEvents"] = [dict(e, dur=-5) if e.get("cat") == "kernel" else e for e in doc["traceEvents"]]
    return synthetic.write_document(tmp_path / f"{how}.json", doc)


def _nsys_without_kernel_table(tmp_path: Path) -> Path:
    b = ExportBuilder()
    for _ in range(10):
        b.memcpy("HtoD", "pageable", "device", 1 << 20, 50_000)
        b.kernel("k", 10_000)
        b.synchronize("cudaStreamSynchronize_v3020", 2)
    path = b.write(tmp_path / "nokernels.sqlite")
    con = sqlite3.connect(path)
    con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    con.commit()
    con.close()
    return path


def _corrupt_sqlite(tmp_path: Path) -> Path:
    b = ExportBuilder()
    for _ in range(200):
        b.kernel("k", 10_000)
        b.synchronize("cudaStreamSynchronize_v3020", 2)
    data = bytearray(b.write(tmp_path / "whole.sqlite").read_bytes())
    for page in range(4096, len(data), 4096):  # every page after the first: the schema reads, the rows do not
        data[page + 100:page + 400] = b"\xff" * 300
    path = tmp_path / "corrupt.sqlite"
    path.write_bytes(bytes(data))
    return path


@pytest.fixture
def unjudgeable(tmp_path) -> list[Path]:
    return [_without_kernels(tmp_path, "dropped"), _without_kernels(tmp_path, "invalid"),
            _nsys_without_kernel_table(tmp_path)]


def test_kernel_launches_without_kernel_records_get_a_verdict_everywhere(capsys, tmp_path, unjudgeable):
    for path in unjudgeable:
        rc, out, err = cli_run(capsys, "doctor", path)
        assert rc == 0 and "internal error" not in err, (path.name, err)
        assert "kernels were not recorded" in out and "kernels not recorded:" in out, out
        rc, out, _ = cli_run(capsys, "doctor", path, "--json")
        assert rc == 0 and "kernels were not recorded" in json.loads(out)["verdict"]
        html = tmp_path / f"{path.stem}.html"
        rc, out, err = cli_run(capsys, "doctor", path, "--html", html)
        assert rc == 0 and "internal error" not in err and "<html" in html.read_text()


def _damaged(tmp_path: Path) -> dict[str, Path]:
    rng = random.Random(7)
    files = {"corrupt.sqlite": _corrupt_sqlite(tmp_path)}
    for i in range(4):  # gzip of a 0x80 byte and noise: looks like a pickle of no protocol there is
        path = tmp_path / f"noise{i}.json.gz"
        path.write_bytes(gzip.compress(bytes([0x80, rng.randrange(6, 256)]) + rng.randbytes(3000)))
        files[path.name] = path
    garbage = tmp_path / "two.csv"
    garbage.write_text("ID,Kernel Name\n0,foo\n1,bar\n")
    files[garbage.name] = garbage
    deep = tmp_path / "deep.json"
    deep.write_text('{"traceEvents":[{"ph":"X","name":"a","ts":1,"dur":1,"args":' + "[" * 100_000 + "]" * 100_000
                    + "}]}")
    files[deep.name] = deep
    return files


def test_damaged_inputs_are_one_line_in_every_command(capsys, tmp_path):
    for name, path in _damaged(tmp_path).items():
        commands = [("doctor", path), ("doctor", path, "--json"), ("doctor", path, "--html", tmp_path / "r.html")]
        if name.endswith(".sqlite") or name.endswith(".json"):
            commands += [("stats", path), ("sql", path, "SELECT count(*) FROM kernels")]
        for args in commands:
            rc, out, err = cli_run(capsys, *args)
            assert rc == 2 and err.startswith("perflab: error: ") and err.count("\n") == 1, (args, err)
            assert "internal error" not in err and "pickle protocol" not in err, (args, err)
        assert not (tmp_path / "r.html").exists()
    err = cli_run(capsys, "doctor", tmp_path / "corrupt.sqlite")[2]
    assert "the SQLite file is damaged" in err
    assert "no metric columns" in cli_run(capsys, "doctor", tmp_path / "two.csv")[2]


mcp = pytest.importorskip("mcp", reason="the MCP SDK (perflab[mcp]) is not installed")


def _mcp_doctor(paths: list[Path]) -> list:
    import anyio
    from mcp import Client, StdioServerParameters

    env = {"PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    if os.environ.get("PERFLAB_HOME"):
        env["PERFLAB_HOME"] = os.environ["PERFLAB_HOME"]
    params = StdioServerParameters(command=sys.executable, args=["-m", "perflab", "mcp"], env=env)

    async def main():
        async with Client(params) as client:
            return [await client.call_tool("doctor", {"path": str(p)}) for p in paths]
    return anyio.run(main)


def test_through_mcp_the_same_verdicts_and_lines(capsys, tmp_path, unjudgeable):
    damaged = _damaged(tmp_path)
    results = _mcp_doctor(unjudgeable + list(damaged.values()))
    for path, r in zip(unjudgeable, results):
        assert not r.is_error and "kernels were not recorded" in r.structured_content["verdict"], path
    for (name, path), r in zip(damaged.items(), results[len(unjudgeable):]):
        text = r.content[0].text  # the SDK's prefix, then the CLI's own line (not the SDK's bare crash line)
        assert r.is_error and "\n" not in text and "internal error" not in text, (name, text)
        line = cli_run(capsys, "doctor", path)[2].removeprefix("perflab: error: ").strip()
        assert text == f"Error executing tool doctor: {line}", name
