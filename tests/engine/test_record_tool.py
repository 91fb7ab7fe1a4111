"""scripts/record.py, the recording tool: `catalog-check --jsonl` rows, `catalog-summary --checks` (which merges
them), `tune-size`, `puzzle --return-to` end to end on a host-side puzzle, and its subcommands' table."""
import importlib
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest


REPO = Path(__file__).resolve().parents[2]
RECORD = REPO / "scripts" / "record.py"


@pytest.fixture(autouse=True)
def _scratch_here(tmp_path, monkeypatch):
    """The recorders' work folders (tempfile) go under this test's folder."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))


def script(name):
    """A recorder of scripts/recorders, imported the way record.py imports it."""
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        return importlib.import_module(f"recorders.{name}")
    finally:
        sys.path.remove(str(REPO / "scripts"))


def result(passed, ci_low, point=3.0, bar=2.0, incorrect=False):
    speed = SimpleNamespace(passed=passed, point=point, ci_low=ci_low, ci_high=point * 1.05, bar=bar,
                            statistic="median")
    return SimpleNamespace(passed=passed and not incorrect, speed=speed, evidence=None,
                           correctness=SimpleNamespace(ok=not incorrect, message="wrong sum"))


def verification(sol, starter):
    return SimpleNamespace(solution=sol, starter=starter, ok=sol.passed and not starter.passed,
                           problems=lambda: [] if sol.passed and not starter.passed else ["bad"])


def record(*args, **kw):
    return subprocess.run([sys.executable, str(RECORD), *map(str, args)], capture_output=True, text=True, **kw)


def summary(*files):
    return record("catalog-summary", "--checks", *files)


def test_rows_written_by_the_check_are_read_by_the_summary(tmp_path):
    rec = script("puzzles")
    log = tmp_path / "a.jsonl"
    good = verification(result(True, 2.5), result(False, 0.98, point=1.0))
    bad = verification(result(False, 0.0, incorrect=True), result(False, 0.97, point=1.0))
    rec._log(log, SimpleNamespace(id="launch-overhead"), good, "ok", 12.3)
    rec._log(log, SimpleNamespace(id="host-sync"), bad, "solution fails", 4.0)
    rec._log(log, SimpleNamespace(id="straggler"), None, "not run here: needs 2 GPUs", 0.1)
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["puzzle"] for r in rows] == ["launch-overhead", "host-sync", "straggler"]
    assert rows[0]["ok"] is True and rows[0]["ci_low"] == 2.5 and rows[0]["starter_ci_low"] == 0.98
    assert rows[1]["solution_why"].startswith("incorrect") and "ok" not in rows[2]

    later = tmp_path / "b.jsonl"  # a second call (another machine) checks straggler
    rec._log(later, SimpleNamespace(id="straggler"), good, "ok", 30.0)
    p = summary(log, later)
    assert p.returncode == 1  # one wrong, and most of the catalog unchecked
    assert "| launch-overhead |" in p.stdout and "3.00x (2.50–3.15)" in p.stdout
    assert "FAILS: incorrect: wrong sum" in p.stdout
    assert "2 of 3 checked puzzles behave" in p.stdout


def test_summary_refuses_missing_files(tmp_path):
    p = summary(tmp_path / "none.jsonl")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "none.jsonl" in p.stderr


def test_resume_skips_what_the_file_has_checked(tmp_path):
    rec = script("puzzles")
    log = tmp_path / "a.jsonl"
    rec._log(log, SimpleNamespace(id="host-compute"), verification(result(True, 2.5), result(False, 0.9)), "ok", 1.0)
    rec._log(log, SimpleNamespace(id="with-stack"), None, "not run here: no GPU", 0.0)
    assert rec._checked(log) == {"host-compute"} and rec._checked(tmp_path / "none.jsonl") == set()


def test_a_crashing_puzzle_does_not_lose_the_others(tmp_path, monkeypatch, capsys):
    rec = script("puzzles")
    good = verification(result(True, 2.5), result(False, 0.9))
    good.solution.slow, good.solution.fixed = {"median_ms": 3.0}, {"median_ms": 1.0}

    def verify(p, device, workdir, seed):
        if p.id == "host-compute":
            raise RuntimeError("nvrtc: error: identifier undefined\nmore")
        return good

    monkeypatch.setattr(rec.runner, "require_device", lambda p, what: "cpu")
    monkeypatch.setattr(rec.recording, "verify", verify)
    monkeypatch.setattr(rec.recording, "why_failed", lambda r: "passed" if r.passed else "CI low < bar")
    log = tmp_path / "c.jsonl"
    code = rec.check(["host-compute", "with-stack", "--jsonl", str(log)])
    out = capsys.readouterr()
    rows = {r["puzzle"]: r for r in map(json.loads, log.read_text().splitlines())}
    assert code == 1 and rows["with-stack"]["ok"] is True
    assert rows["host-compute"]["verdict"] == "crashed: RuntimeError: nvrtc: error: identifier undefined"
    assert "Traceback" in out.err and "1 of 1 checked puzzles behave" in out.out


def test_size_tuning_tries_each_value_and_restores_the_puzzle(tmp_path):
    folder = REPO / "src" / "perflab" / "catalog" / "22-with-stack"
    before = {f: (folder / f).read_text() for f in ("workload.py", "solution.py")}
    p = record("tune-size", "with-stack", "seq", "256", "--jsonl", tmp_path / "tune.jsonl")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "tune.jsonl").read_text().splitlines()]
    assert [r["size"] for r in rows] == [{"seq": 256}] and rows[0]["puzzle"] == "with-stack" and "ok" in rows[0]
    assert {f: (folder / f).read_text() for f in before} == before
    bad = record("tune-size", "with-stack", "nokey", "1")
    assert bad.returncode == 2 and "nokey" in bad.stderr


def test_keep_failed_copies_the_check_folders_of_a_puzzle_that_misbehaves(tmp_path, monkeypatch, capsys):
    rec = script("puzzles")
    good = verification(result(True, 2.5), result(False, 0.9))
    bad = verification(result(False, 0.0, incorrect=True), result(False, 0.9))
    for v in (good, bad):
        v.solution.slow, v.solution.fixed = {"median_ms": 3.0}, {"median_ms": 1.0}
    bad.solution.evidence = SimpleNamespace(found=["launch-overhead (high)", "host-compute (medium)"])

    def verify(p, device, workdir, seed):
        (workdir / "check-solution").mkdir()
        (workdir / "check-solution" / "mine.trace.json.gz").write_bytes(p.id.encode())
        return bad if p.id == "with-stack" else good

    monkeypatch.setattr(rec.runner, "require_device", lambda p, what: "cpu")
    monkeypatch.setattr(rec.recording, "verify", verify)
    monkeypatch.setattr(rec.recording, "why_failed", lambda r: "passed" if r.passed else "still found")
    kept, log = tmp_path / "kept", tmp_path / "c.jsonl"
    assert rec.check(["host-compute", "with-stack", "--jsonl", str(log), "--keep-failed", str(kept)]) == 1
    assert [p.name for p in kept.iterdir()] == ["with-stack"]
    assert (kept / "with-stack" / "check-solution" / "mine.trace.json.gz").read_bytes() == b"with-stack"
    rows = {r["puzzle"]: r for r in map(json.loads, log.read_text().splitlines())}
    assert rows["with-stack"]["solution_found"] == ["launch-overhead (high)", "host-compute (medium)"]
    assert rows["host-compute"]["solution_found"] is None


def test_every_subcommand_is_listed_and_has_its_entry_point():
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        tool = importlib.import_module("record")
        for name, (module, entry, _) in tool.SUBCOMMANDS.items():
            assert callable(getattr(importlib.import_module(f"recorders.{module}"), entry)), name
    finally:
        sys.path.remove(str(REPO / "scripts"))
    listed = record("--help")
    assert listed.returncode == 0 and all(f"  {name} " in listed.stdout for name in tool.SUBCOMMANDS)
    unknown = record("record-everything")
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1 and "record-everything" in unknown.stderr


def test_a_puzzle_is_recorded_end_to_end_and_packed(tmp_path):
    """A host-side puzzle runs on the CPU: profiles, both checks and its artifacts, packed as one file."""
    artifacts = REPO / "src" / "perflab" / "catalog" / "22-with-stack" / "artifacts"
    before = sorted((p.name, p.stat().st_mtime_ns) for p in artifacts.iterdir())
    back = tmp_path / "back"
    p = record("puzzle", "with-stack", "--return-to", back, "--time-limit", 400, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert [f.name for f in back.iterdir()] == ["rec.tgz"]
    with tarfile.open(back / "rec.tgz") as tar:
        names = set(tar.getnames())
        manifest = json.load(tar.extractfile("rec/22-with-stack/artifacts/manifest.json"))
        rows = [json.loads(r) for r in tar.extractfile("rec/checks.jsonl").read().decode().splitlines()]
    assert {"rec/22-with-stack/artifacts/slow.trace.json.gz", "rec/22-with-stack/artifacts/measurements.json",
            "rec/gpu.txt", "rec/rec.log"} <= names
    assert manifest["command"].startswith("python3 scripts/record.py puzzle with-stack --out ")
    assert [(r["puzzle"], r["ok"]) for r in rows] == [("with-stack", True)]
    assert sorted((p.name, p.stat().st_mtime_ns) for p in artifacts.iterdir()) == before   # the catalog untouched


def test_puzzle_refuses_an_out_folder_and_a_return_folder_together(tmp_path):
    p = record("puzzle", "with-stack", "--out", tmp_path / "a", "--return-to", tmp_path / "b")
    assert p.returncode == 2 and "not both" in p.stderr and not (tmp_path / "a").exists()


def test_a_step_over_its_limit_is_ended_with_its_children(tmp_path):
    common = script("common")
    run = common.Session(tmp_path / "w", budget_s=60)
    child = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); " \
            "print('started', flush=True); time.sleep(60)"
    assert run.run([sys.executable, "-c", child], "slow.log", 2) == 124
    log = (tmp_path / "w" / "slow.log").read_text()
    assert "started" in log and log.rstrip().endswith("exit 124") and "steps.log" not in log
    assert run.run([sys.executable, "-c", "print('USDT probe'); print('kept')"], "quick.log", 30) == 0
    assert "USDT" not in (tmp_path / "w" / "quick.log").read_text()


def test_a_large_result_comes_back_in_parts(tmp_path, monkeypatch):
    common = script("common")
    folder = tmp_path / "big"
    folder.mkdir()
    (folder / "data.bin").write_bytes(os.urandom(300_000))
    monkeypatch.setattr(common, "PART_BYTES", 100_000)
    parts = common.pack(folder, tmp_path / "out")
    assert [p.name for p in parts] == [f"big.tgz.part{i:02d}" for i in range(len(parts))] and len(parts) >= 3
    joined = tmp_path / "big.tgz"
    joined.write_bytes(b"".join(p.read_bytes() for p in parts))
    with tarfile.open(joined) as tar:
        assert tar.extractfile("big/data.bin").read() == (folder / "data.bin").read_bytes()


def test_the_multigpu_plumbing_runs_dry_on_two_cpu_ranks(tmp_path):
    """`record.py multigpu --dry` (gloo, 2 processes): the collective sweeps step, packed for the trip back."""
    p = record("multigpu", "--dry", "--steps", "collectives", "--budget-s", 240, "--return-to", tmp_path / "back",
               timeout=400)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    with tarfile.open(tmp_path / "back" / "multigpu.tgz") as tar:
        sweep = json.load(tar.extractfile("multigpu/collectives_2gpu.json"))
        names = set(tar.getnames())
    assert sweep["world_size"] == 2 and {"multigpu/topology.txt", "multigpu/steps.log"} <= names
