"""perflab mcp: the SDK's own client against a real `python3 -m perflab mcp` process on stdio. Each tool gives
the same versioned JSON as the command's --json; errors are one line; nothing is written unless a call names
the output, and then under the rule every perflab output follows."""
from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from conftest import cli_run
from perflab.trace.builders import synthetic

mcp = pytest.importorskip("mcp", reason="the MCP SDK (perflab[mcp]) is not installed")
anyio = pytest.importorskip("anyio")

SRC = Path(__file__).resolve().parents[2] / "src"
WALK = SRC / "perflab" / "catalog" / "65-walk" / "artifacts" / "slow.investigation"


def _session(calls):
    """Run `calls(client)` against a fresh server process; returns what it returns."""
    from mcp import Client, StdioServerParameters

    env = {"PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    if os.environ.get("PERFLAB_HOME"):
        env["PERFLAB_HOME"] = os.environ["PERFLAB_HOME"]  # the test's own home (conftest)
    params = StdioServerParameters(command=sys.executable, args=["-m", "perflab", "mcp"], env=env)

    async def main():
        async with Client(params) as client:
            return await calls(client)
    return anyio.run(main)


def _cli_json(capsys, *args) -> dict:
    rc, out, err = cli_run(capsys, *args, "--json")
    assert rc == 0, err
    return json.loads(out)


def test_every_tool_serves_the_commands_json(capsys, tmp_path):
    before = synthetic.host_bound(steps=3).write(tmp_path / "before.json")
    after = synthetic.gpu_bound(steps=3).write(tmp_path / "after.json")
    query = "SELECT name, count(*) AS n FROM kernels GROUP BY 1 ORDER BY 1"

    async def calls(client):
        tools = sorted(t.name for t in (await client.list_tools()).tools)
        got = {}
        for name, args in (("doctor", {"path": str(before)}), ("stats", {"path": str(before)}),
                           ("diff", {"before": str(before), "after": str(after)}),
                           ("sql", {"path": str(before), "query": query}),
                           ("investigation", {"folder": str(WALK)})):
            r = await client.call_tool(name, args)
            assert not r.is_error, (name, r.content)
            got[name] = r.structured_content
        return tools, got

    listed = sorted(os.listdir(tmp_path))
    tools, got = _session(calls)
    assert sorted(p for p in os.listdir(tmp_path) if p != "home") == listed  # read-only tools wrote nothing
    assert tools == ["diff", "doctor", "investigation", "sql", "stats"]
    assert got["doctor"] == _cli_json(capsys, "doctor", before)
    assert got["stats"] == _cli_json(capsys, "stats", before)
    assert got["diff"] == _cli_json(capsys, "diff", before, after)
    assert got["sql"] == {**_cli_json(capsys, "sql", before, query), "written": []}
    assert got["investigation"] == _cli_json(capsys, "doctor", WALK)
    assert {d["schema"] for d in got.values()} == {"perflab.doctor/2", "perflab.stats/1", "perflab.diff/1",
                                                   "perflab.sql/1", "perflab.investigation/1"}


def test_errors_are_one_line_and_writes_follow_the_output_rule(tmp_path):
    trace = synthetic.host_bound(steps=3).write(tmp_path / "t.json")
    mine = tmp_path / "k.csv"
    mine.write_text("mine")
    os.mkfifo(tmp_path / "pipe.html")

    async def calls(client):
        out = {}
        out["missing"] = await client.call_tool("doctor", {"path": str(tmp_path / "nope.json")})
        out["copy"] = await client.call_tool("sql", {"path": str(trace), "query": "SELECT 1", "out": str(mine)})
        out["fifo"] = await client.call_tool("doctor", {"path": str(trace), "html": str(tmp_path / "pipe.html"),
                                                        "force": True})
        out["html"] = await client.call_tool("doctor", {"path": str(trace), "html": str(tmp_path / "r.html")})
        out["gate"] = await client.call_tool("diff", {"before": str(trace), "after": str(trace), "gate_pct": 5})
        return out

    r = _session(calls)
    text = {k: v.content[0].text for k, v in r.items()}
    assert r["missing"].is_error and "nope.json: no such file" in text["missing"] and "\n" not in text["missing"]
    assert r["copy"].is_error and "exists: pass --force" in text["copy"] and mine.read_text() == "mine"
    assert r["fifo"].is_error and "a FIFO, not a regular file" in text["fifo"]
    assert stat.S_ISFIFO(os.lstat(tmp_path / "pipe.html").st_mode)
    assert not r["html"].is_error and "<html" in (tmp_path / "r.html").read_text()
    assert r["gate"].is_error and "not comparable for --gate" in text["gate"]  # 3 steps a side


def test_sql_through_mcp_reads_only_the_trace_and_writes_only_out(tmp_path):
    """An agent led by text inside a trace to read the user's files or overwrite the trace gets one line and
    changes nothing; out= writes the result under the rule for outputs."""
    trace = synthetic.host_bound(steps=3).write(tmp_path / "t.json")
    secret = tmp_path / "secret.txt"
    secret.write_text("the user's own secret")
    original = trace.read_bytes()
    calls_made = [
        {"query": f"SELECT * FROM read_text('{secret}')"},
        {"query": f"SELECT * FROM glob('{tmp_path}/*')"},
        {"query": f"COPY /* FROM */ (SELECT 1) TO '{trace}'"},
        {"query": f"PREPARE p AS COPY (SELECT 1) TO '{trace}'; EXECUTE p"},
        {"query": f"SET log_query_path='{trace}'; SELECT 1"},
        {"query": "SELECT 1", "out": str(trace), "force": True},
        {"query": "SELECT name FROM kernels", "out": str(tmp_path / "k.csv")},
    ]

    async def calls(client):
        return [await client.call_tool("sql", {"path": str(trace), **args}) for args in calls_made]

    *refused, wrote = _session(calls)
    for r in refused:
        text = r.content[0].text
        assert r.is_error and "\n" not in text and "secret" not in text.replace(str(secret), ""), text
    assert trace.read_bytes() == original
    assert not wrote.is_error and wrote.structured_content["written"] == [str(tmp_path / "k.csv")]
    assert (tmp_path / "k.csv").read_text().splitlines()[0] == "name"
