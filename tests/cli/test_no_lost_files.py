"""Nothing lost: no command writes over an existing file without --force, none ever over its own input
(same path, a symlink to it, a hard link of it), and `perflab profile` keeps every run.

WRITERS names every command that writes a file and the test that shows it keeps what is there;
test_every_command_is_classified fails when a command is added without saying whether it writes."""
from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import pytest

from conftest import FAKE_ID, cli_run
from perflab.__main__ import build_app
from perflab.trace.builders import synthetic

REPO = Path(__file__).resolve().parents[2]
NCU_CSV = REPO / "tests" / "data" / "ncu" / "memory_bound_scalar.csv"
HOST_SYNC = REPO / "src" / "perflab" / "catalog" / "02-host-sync" / "artifacts"

# command -> the test below that covers it
WRITERS = {
    "doctor": "test_doctor_html", "diff": "test_diff_html_and_plot", "memory convert": "test_memory_convert",
    "roofline": "test_roofline_out", "bench": "test_bench_out", "ncu": "test_ncu_report_of_the_same_name",
    "monitor": "test_monitor_csv", "scale": "test_scale_out", "profile": "test_profile_keeps_every_run",
    "start": "test_start_and_run_and_check_write_new_files_only", "run": "test_start_and_run_and_check_write_new_files_only",
    "check": "test_start_and_run_and_check_write_new_files_only",
    "investigate": "test_investigate_keeps_every_run", "memory record": "test_memory_record_out",
    "sql": "test_sql_out",  # --out; the query itself writes nothing (test_sql_sandbox.py)
}
# commands that write no file (answers, hints, progress go to the progress database)
READ_ONLY = {"list", "show", "answer", "hint", "solution", "progress", "stats", "taxonomy",
             "mcp"}  # stats prints to stdout; mcp writes only paths a call names (tests/cli/test_mcp_server.py)


def _commands(group, prefix="") -> set[str]:
    out = set()
    for name, cmd in group.commands.items():
        full = f"{prefix}{name}"
        out |= _commands(cmd, full + " ") if hasattr(cmd, "commands") else {full}
    return out


def test_every_command_is_classified():
    import typer

    commands = _commands(typer.main.get_command(build_app()))
    assert commands == set(WRITERS) | READ_ONLY
    assert set(WRITERS.values()) <= set(globals())


cli = cli_run


def refused(capsys, *args, why="exists: pass --force") -> str:
    rc, _, err = cli(capsys, *args)
    assert rc == 2 and why in err and err.count("\n") == 1, err
    return err


def mine(path: Path, text: str = "mine") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def links_to(target: Path, folder: Path) -> list[Path]:
    """The input itself, a symlink to it and a hard link of it."""
    folder.mkdir(exist_ok=True)
    sym, hard = folder / f"sym-{target.name}", folder / f"hard-{target.name}"
    sym.symlink_to(target)
    os.link(target, hard)
    return [target, sym, hard]


@pytest.fixture
def trace(tmp_path) -> Path:
    return synthetic.host_bound(steps=3).write(tmp_path / "t.json")


def test_doctor_html(capsys, tmp_path, trace):
    out = mine(tmp_path / "r.html")
    refused(capsys, "doctor", trace, "--html", out)
    assert out.read_text() == "mine"
    for same in links_to(trace, tmp_path / "links"):
        refused(capsys, "doctor", trace, "--html", same, "--force", why="never writes over its input")
    assert json.loads(trace.read_text())["traceEvents"]
    assert cli(capsys, "doctor", trace, "--html", out, "--force")[0] == 0 and "<html" in out.read_text()


def test_diff_html_and_plot(capsys, tmp_path, trace):
    other = synthetic.gpu_bound(steps=3).write(tmp_path / "g.json")
    for opt, name in (("--html", "d.html"), ("--plot", "d.png")):
        out = mine(tmp_path / name)
        refused(capsys, "diff", trace, other, opt, out)
        assert out.read_text() == "mine"
        refused(capsys, "diff", trace, other, opt, other, "--force", why="never writes over its input")
    for same in links_to(trace, tmp_path / "links")[1:]:
        refused(capsys, "diff", trace, other, "--html", same, "--force", why="never writes over its input")
    assert json.loads(trace.read_text()) and json.loads(other.read_text())


def test_memory_convert(capsys, tmp_path):
    snap = tmp_path / "snap.pickle"
    snap.write_bytes(pickle.dumps({"segments": [], "device_traces": [[]]}))
    original = snap.read_bytes()
    for same in links_to(snap, tmp_path / "links"):
        refused(capsys, "memory", "convert", snap, same, why="never writes over its input")
        refused(capsys, "memory", "convert", snap, same, "--force", why="never writes over its input")
        assert same.read_bytes() == original
    out = mine(tmp_path / "snap.json")
    refused(capsys, "memory", "convert", snap, out)
    assert out.read_text() == "mine"
    assert cli(capsys, "memory", "convert", snap, out, "--force")[0] == 0
    assert json.loads(out.read_text())["segments"] == [] and snap.read_bytes() == original


def test_roofline_out(capsys, tmp_path):
    report = Path(shutil.copy(NCU_CSV, tmp_path / "k.pdf"))  # read by content, so any name will do
    out = mine(tmp_path / "roof.png")
    refused(capsys, "roofline", report, "--out", out)
    assert out.read_text() == "mine"
    sym, hard = tmp_path / "sym.svg", tmp_path / "hard.html"
    sym.symlink_to(report)
    os.link(report, hard)
    for same in (report, sym, hard):
        refused(capsys, "roofline", report, "--out", same, "--force", why="never writes over its input")
    assert report.read_text() == NCU_CSV.read_text()
    assert cli(capsys, "roofline", report, "--out", out, "--force")[0] == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sql_out(capsys, tmp_path, trace):
    out = mine(tmp_path / "k.csv")
    refused(capsys, "sql", trace, "SELECT 1", "--out", out)
    assert out.read_text() == "mine"
    for same in links_to(trace, tmp_path / "links"):
        refused(capsys, "sql", trace, "SELECT 1", "--out", same, "--force", why="never writes over its input")
    refused(capsys, "sql", trace, f"COPY (SELECT 1) TO '{trace}'", "--force", why="DuckDB's sandbox")
    assert json.loads(trace.read_text())["traceEvents"]


def test_bench_out(capsys, tmp_path):
    out = mine(tmp_path / "ceilings.json")
    refused(capsys, "bench", "--quick", "--out", out)
    refused(capsys, "bench", "--allreduce", "--out", out)
    assert out.read_text() == "mine"


def test_ncu_report_of_the_same_name(capsys, tmp_path):
    script = mine(tmp_path / "app.py", "print(1)")
    report = mine(tmp_path / "prof" / "app.ncu-rep")
    refused(capsys, "ncu", "--out", tmp_path / "prof", "--", "python", script)
    assert report.read_text() == "mine"


def test_monitor_csv(capsys, tmp_path):
    out = mine(tmp_path / "samples.csv")
    refused(capsys, "monitor", "--csv", out, "--", "true")
    assert out.read_text() == "mine"


def test_scale_out(capsys, tmp_path):
    out = tmp_path / "scale"
    mine(out / "scaling.json", "{}")
    refused(capsys, "scale", "--out", out, "--", "x.py", why="already holds scaling.json")
    assert (out / "scaling.json").read_text() == "{}"


def _stub_profile(monkeypatch, traces):
    """profile_command without running anything: each call writes the next recorded trace into its folder."""
    from perflab.toolkit import profile as lib

    processes = [{"pid": 1, "rank": None, "torch": True, "steps_by": "top-level nn.Module calls", "boundaries": 12,
                  "recorded_steps": 10, "trace": "x"}]
    queue = list(traces)

    def run(cmd, **kw):
        kw["out"].mkdir(parents=True, exist_ok=True)
        dest = kw["out"] / "trace.json.gz"
        shutil.copy(queue.pop(0), dest)
        return lib.ProfiledRun(0, [dest], processes)

    monkeypatch.setattr(lib, "profile_command", run)


def test_profile_keeps_every_run(capsys, tmp_path, monkeypatch):
    _stub_profile(monkeypatch, [HOST_SYNC / "slow.trace.json.gz", HOST_SYNC / "solution.trace.json.gz"])
    script = mine(tmp_path / "app.py", "")
    assert cli(capsys, "profile", "--", "python", script)[0] == 0
    rc, out, _ = cli(capsys, "profile", "--", "python", script)
    assert rc == 0 and "run:1" in out
    runs = sorted((tmp_path / "work" / "profile").iterdir())
    assert len(runs) == 2 and all((r / "trace.json.gz").is_file() for r in runs)
    assert (runs[0] / "trace.json.gz").read_bytes() == (HOST_SYNC / "slow.trace.json.gz").read_bytes()
    rc, out, _ = cli(capsys, "doctor", "run:2")
    assert rc == 0 and "host-sync" in out
    rc, out, _ = cli(capsys, "diff", "run:2", "run:1", "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["speedup"] > 3 and "host-sync" in [f["id"] for f in doc["findings"]
                                                            if f["status"] == "disappeared"]
    # an explicit folder that holds an earlier run's traces is refused without --force
    refused(capsys, "profile", "--out", runs[0], "--", "python", script, why="already holds trace.json.gz")
    assert (runs[0] / "trace.json.gz").read_bytes() == (HOST_SYNC / "slow.trace.json.gz").read_bytes()


def test_investigate_keeps_every_run(capsys, tmp_path, monkeypatch):
    _stub_profile(monkeypatch, [HOST_SYNC / "slow.trace.json.gz", HOST_SYNC / "solution.trace.json.gz"])
    from perflab.errors import PerflabError

    def no_ncu():
        raise PerflabError("no ncu here")

    monkeypatch.setattr("perflab.toolkit.ncu_runner.find_ncu", no_ncu)
    script = mine(tmp_path / "app.py", "")
    html = mine(tmp_path / "r.html")
    refused(capsys, "investigate", "--html", html, "--", "python", script)
    refused(capsys, "investigate", "--html", script, "--force", "--", "python", script, why="never writes over its input")
    assert html.read_text() == "mine" and script.read_text() == ""
    assert cli(capsys, "investigate", "--", "python", script)[0] == 0
    assert cli(capsys, "investigate", "--html", html, "--force", "--", "python", script)[0] == 0
    runs = sorted((tmp_path / "work" / "investigate").iterdir())
    assert len(runs) == 2 and all((r / "investigation.json").is_file() for r in runs)
    assert (runs[0] / "trace.json.gz").read_bytes() == (HOST_SYNC / "slow.trace.json.gz").read_bytes()
    assert "<html" in html.read_text()
    refused(capsys, "investigate", "--out", runs[0], "--", "python", script, why="already holds")
    assert (runs[0] / "trace.json.gz").read_bytes() == (HOST_SYNC / "slow.trace.json.gz").read_bytes()


def test_memory_record_out(capsys, tmp_path):
    script = mine(tmp_path / "app.py", "")
    out = mine(tmp_path / "m.json.gz")
    refused(capsys, "memory", "record", "--out", out, "--", "python", script)
    for same in links_to(script, tmp_path / "links"):
        refused(capsys, "memory", "record", "--out", same, "--force", "--", "python", script,
                why="never writes over its input")
    assert out.read_text() == "mine" and script.read_text() == ""


@pytest.fixture
def cpu_runs(fake_catalog, monkeypatch):
    from perflab.puzzles.engine import runner

    monkeypatch.setattr(runner, "cuda_available", lambda: False)


def test_start_and_run_and_check_write_new_files_only(capsys, tmp_path, cpu_runs):
    fix = mine(tmp_path / "work" / FAKE_ID / "fix.py", "# my own fix, in progress\n")
    rc, out, _ = cli(capsys, "start", FAKE_ID)
    assert rc == 0 and "already exists" in out and fix.read_text() == "# my own fix, in progress\n"
    fix.unlink()
    assert cli(capsys, "start", FAKE_ID)[0] == 0
    runs = tmp_path / "work" / FAKE_ID / "runs"
    assert cli(capsys, "run", FAKE_ID, "--steps", "2")[0] == 0
    first = {p: p.read_bytes() for p in runs.rglob("*") if p.is_file()}
    assert cli(capsys, "run", FAKE_ID, "--steps", "2")[0] == 0
    solution = tmp_path / "catalog" / f"99-{FAKE_ID}" / "solution.py"
    assert cli(capsys, "check", FAKE_ID, "--fix", solution)[0] == 0
    folders = sorted(p.name for p in runs.iterdir())
    assert len(folders) == 3 and folders[-1].endswith("-check"), folders
    assert {p: p.read_bytes() for p in first} == first  # the first run's files are as they were
