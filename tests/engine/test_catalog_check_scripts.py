"""scripts/check_catalog_gpu.py --jsonl rows and scripts/catalog_summary.py --checks, which merges them."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[2]


def script(name):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def result(passed, ci_low, point=3.0, bar=2.0, incorrect=False):
    speed = SimpleNamespace(passed=passed, point=point, ci_low=ci_low, ci_high=point * 1.05, bar=bar,
                            statistic="median")
    return SimpleNamespace(passed=passed and not incorrect, speed=speed, evidence=None,
                           correctness=SimpleNamespace(ok=not incorrect, message="wrong sum"))


def verification(sol, starter):
    return SimpleNamespace(solution=sol, starter=starter, ok=sol.passed and not starter.passed,
                           problems=lambda: [] if sol.passed and not starter.passed else ["bad"])


def summary(*files):
    return subprocess.run([sys.executable, str(REPO / "scripts" / "catalog_summary.py"), "--checks",
                           *map(str, files)], capture_output=True, text=True)


def test_rows_written_by_the_check_are_read_by_the_summary(tmp_path):
    rec = script("record_artifacts")
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
    rec = script("record_artifacts")
    log = tmp_path / "a.jsonl"
    rec._log(log, SimpleNamespace(id="host-compute"), verification(result(True, 2.5), result(False, 0.9)), "ok", 1.0)
    rec._log(log, SimpleNamespace(id="with-stack"), None, "not run here: no GPU", 0.0)
    assert rec._checked(log) == {"host-compute"} and rec._checked(tmp_path / "none.jsonl") == set()


def test_a_crashing_puzzle_does_not_lose_the_others(tmp_path, monkeypatch, capsys):
    rec = script("record_artifacts")
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
    code = rec.main(["--check-only", "host-compute", "with-stack", "--jsonl", str(log)])
    out = capsys.readouterr()
    rows = {r["puzzle"]: r for r in map(json.loads, log.read_text().splitlines())}
    assert code == 1 and rows["with-stack"]["ok"] is True
    assert rows["host-compute"]["verdict"] == "crashed: RuntimeError: nvrtc: error: identifier undefined"
    assert "Traceback" in out.err and "1 of 1 checked puzzles behave" in out.out


def test_size_tuning_tries_each_value_and_restores_the_puzzle(tmp_path):
    folder = REPO / "src" / "perflab" / "catalog" / "22-with-stack"
    before = {f: (folder / f).read_text() for f in ("workload.py", "solution.py")}
    p = subprocess.run(["bash", str(REPO / "scripts" / "tune_puzzle_size.sh"), "with-stack", "seq", "256"],
                       capture_output=True, text=True, env={**os.environ, "OUT": str(tmp_path)})
    assert p.returncode == 0, p.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "tune.jsonl").read_text().splitlines()]
    assert [r["size"] for r in rows] == [{"seq": 256}] and rows[0]["puzzle"] == "with-stack" and "ok" in rows[0]
    assert {f: (folder / f).read_text() for f in before} == before
    bad = subprocess.run(["bash", str(REPO / "scripts" / "tune_puzzle_size.sh"), "with-stack", "nokey", "1"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "nokey" in bad.stderr


def test_keep_failed_copies_the_check_folders_of_a_puzzle_that_misbehaves(tmp_path, monkeypatch, capsys):
    rec = script("record_artifacts")
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
    assert rec.main(["--check-only", "host-compute", "with-stack", "--jsonl", str(log), "--keep-failed", str(kept)]) == 1
    assert [p.name for p in kept.iterdir()] == ["with-stack"]
    assert (kept / "with-stack" / "check-solution" / "mine.trace.json.gz").read_bytes() == b"with-stack"
    rows = {r["puzzle"]: r for r in map(json.loads, log.read_text().splitlines())}
    assert rows["with-stack"]["solution_found"] == ["launch-overhead (high)", "host-compute (medium)"]
    assert rows["host-compute"]["solution_found"] is None
