"""The multi-GPU puzzles (catalog 70-77): spec, workloads, the torchrun engine on the CPU, replay.

- The engine (puzzles/evidence/multirank.py, rank_worker.py) runs a puzzle's fix check under torchrun with
  the gloo backend, 2 processes: outputs compared rank by rank, the job's timings, one trace per rank.
- The multi-GPU analyses (puzzles/questions/multirank.py) are checked on the H200 x2 fixture traces
  of the DDP example (tests/data/multigpu/h200x2) laid out as a recording, through the straggler
  puzzle's own questions; the sweep analyses on a synthetic sweep.json.
- Every recorded multi-GPU puzzle is replayed from its artifacts: questions computed and graded,
  the doctor on the per-rank traces (`perflab doctor FOLDER --rank R`), planted finding on slow,
  gone from the solution on every rank.
"""
from __future__ import annotations

import importlib.util
import itertools
import json
import shutil
from pathlib import Path

import pytest
from conftest import shipped_file

from perflab.errors import PerflabError
from perflab.puzzles.engine import catalog, replay
from perflab.puzzles.evidence import multirank as distributed
from perflab.puzzles import questions
from perflab.puzzles.questions import multirank as QM

ROOT = Path(__file__).resolve().parents[2]
CATALOG = ROOT / "src" / "perflab" / "catalog"
FIXTURES = ROOT / "tests" / "data" / "multigpu" / "h200x2"
PUZZLES = {
    "exposed-allreduce": "70-exposed-allreduce",
    "straggler": "71-straggler",
    "tp-scaling-knee": "72-tp-scaling-knee",
    "nccl-timeline": "73-nccl-timeline",
    "pipeline-bubble": "74-pipeline-bubble",
    "unbucketed-allreduce": "75-unbucketed-allreduce",
    "ring-attention": "76-ring-attention",
    "expert-skew": "77-expert-skew",
}
_ids = itertools.count()


def puzzle(pid: str):
    return catalog.get(pid)


def load(pid: str, variant: str):
    path = shipped_file(CATALOG / PUZZLES[pid], variant)
    spec = importlib.util.spec_from_file_location(f"mgp_test_{next(_ids)}_{variant}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def wrong_answer(q, value) -> str:
    if q.type == "taxonomy":
        return "memcpy"
    if q.type == "choice":
        return next(x for x in q.choices if x != value)
    return str(float(value) * 3 + 2)


# -- spec and files -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("pid", PUZZLES)
def test_spec_asks_for_several_gpus_and_the_starter_is_the_workload(pid):
    p = puzzle(pid)
    folder = PUZZLES[pid]
    assert p.folder.name == folder and p.order == 10 * int(folder[:2])
    assert p.requirements.gpus == 2 and p.requirements.gpu and distributed.is_multi(p)
    assert p.check.planted == p.taxonomy[0] and p.questions and len(p.hints) >= 3 and p.seeds
    assert (p.folder / "README.md").read_text(encoding="utf-8").strip()
    body = lambda v: p.file(v).read_text(encoding="utf-8").split("from __future__ import annotations", 1)[1]
    assert body("starter") == body("slow")
    assert "What to do" in p.file("starter").read_text(encoding="utf-8")


@pytest.mark.parametrize("pid", PUZZLES)
def test_workloads_agree_on_one_rank_without_a_process_group(pid):
    torch = pytest.importorskip("torch")
    from perflab.puzzles.engine import checker

    slow, sol = load(pid, "workload"), load(pid, "solution")
    p = puzzle(pid)
    a, b = slow.setup("cpu", 11), sol.setup("cpu", 11)
    for _ in range(2):
        expected, got = checker.snapshot(slow.step(a)), checker.snapshot(sol.step(b))
        assert checker.compare(expected, got, p) == ""
    assert any(isinstance(v, torch.Tensor) and v.numel() for _, v in expected)


def test_nproc_per_node_follows_the_torchrun_options(monkeypatch):
    assert distributed.nproc_per_node(2, []) == 2
    assert distributed.nproc_per_node(8, ["--nnodes", "2", "--rdzv-endpoint", "h:29500"]) == 4
    assert distributed.nproc_per_node(3, ["--nnodes=2"]) == 2
    assert distributed.nproc_per_node(4, ["--nnodes", "1:2"]) == 2
    with pytest.raises(PerflabError, match="--nnodes"):
        distributed.nproc_per_node(4, ["--nnodes", "two"])
    monkeypatch.setenv(distributed.ENV_TORCHRUN, "--nnodes 2 --rdzv-endpoint host:29500")
    assert distributed.multi_node() and distributed.torchrun_args()[:2] == ["--nnodes", "2"]
    monkeypatch.delenv(distributed.ENV_TORCHRUN)
    assert not distributed.multi_node()


# -- the engine under torchrun, gloo, 2 processes ----------------------------------------------------------
def test_fix_check_runs_every_rank_under_torchrun_with_gloo(tmp_path, monkeypatch):
    """The solution of exposed-allreduce (async all-reduce per gradient, from autograd hooks) against
    the slow workload on 2 gloo ranks: correct on both, timed as a job, re-profiled once per rank."""
    pytest.importorskip("torch")
    from perflab.trace.kineto import load_ranks

    monkeypatch.setenv(distributed.ENV_LOGS, str(tmp_path / "logs"))
    p = puzzle("exposed-allreduce")
    r = distributed.check(p, p.file("solution"), tmp_path / "check", device="cpu", seed=5, reps=5)
    assert r.correctness.ok, r.correctness.message
    assert r.speed is not None and r.speed.n == 5 and len(r.slow["samples_ms"]) == 5
    # re-profiled per rank and diagnosed; at smoke size on gloo the tiny backward hides little of the
    # all-reduces, and the CPU doctor (doctor/cpu.py) says so on both ranks
    assert r.evidence is not None and r.evidence.planted == "comm-not-overlapped"
    assert all(f.startswith(("rank 0", "rank 1")) for f in r.evidence.found)
    traces = load_ranks(tmp_path / "check" / "mine.ranks")
    assert [t.rank for t in traces] == [0, 1] and {int(t.meta["world_size"]) for t in traces} == {2}
    job = json.loads((tmp_path / "check" / ".check-job" / "job.check.json").read_text())
    assert job["mode"] == "check" and job["device"] == "cpu"
    cmd_log = next((tmp_path / "logs").glob("*/torchrun.check.log")).read_text()
    assert "Traceback" not in cmd_log
    results = sorted((tmp_path / "logs").glob("*/result.rank*.json"))
    assert len(results) == 2 and all(json.loads(f.read_text())["ok"] for f in results)


def test_fix_check_names_the_rank_whose_output_is_wrong(tmp_path):
    pytest.importorskip("torch")
    p = puzzle("exposed-allreduce")
    src = p.file("solution").read_text(encoding="utf-8")
    broken = src.replace('    bucket.div_(state["world"])\n    return bucket',
                         '    bucket.div_(state["world"])\n    if state["rank"] == 1:\n        bucket.mul_(2)\n'
                         '    return bucket')
    assert broken != src
    fix = tmp_path / "fix.py"
    fix.write_text(broken, encoding="utf-8")
    r = distributed.check(p, fix, tmp_path / "check", device="cpu", seed=3, reps=5)
    assert not r.correctness.ok and r.correctness.message.startswith("rank 1: checked step 1")
    assert r.speed is None and not r.passed


def test_a_failing_rank_is_one_line_naming_the_rank(tmp_path):
    pytest.importorskip("torch")
    p = puzzle("straggler")
    bad = tmp_path / "bad.py"
    bad.write_text("def setup(device, seed):\n    import torch.distributed as d\n"
                   "    if d.get_rank() == 1:\n        raise ValueError('no shard here')\n    return {}\n"
                   "def step(state):\n    return None\n", encoding="utf-8")
    with pytest.raises(PerflabError, match=r"rank 1 failed: .*ValueError: no shard here"):
        distributed.run_variant(p, bad, "slow", tmp_path / "run", device="cpu", command="test", steps=1)


# -- the analyses on real per-rank traces (H200 x2 fixtures) -------------------------------------------------


def test_evidence_reads_a_folder_of_ranks(straggler_recording):
    ev = straggler_recording
    assert ev.has("slow") and ev.trace_path("slow").is_dir() and not ev.has("mine")
    assert [t.rank for t in ev.ranks("slow")] == [0, 1] and ev.trace("slow").rank == 0
    assert ev.report("slow").top.id == "load-imbalance"
    assert ev.report("slow", rank=1).source["rank"] == 1
    assert ev.summary("slow")["steps"] == 4


def test_straggler_questions_on_the_fixture_traces(straggler_recording):
    """The straggler puzzle's own questions, answered from real H200 traces of a planted straggler."""
    from perflab.analysis.multigpu.collectives import multirank_summary

    ev = straggler_recording
    s = multirank_summary(ev.ranks("slow"))
    p = puzzle("straggler")
    got = {q.key: questions.compute(q, ev) for q in p.questions}
    assert got["cause"].value == "load-imbalance" and got["straggler"].value == 1
    assert got["wait_ms"].value == pytest.approx(s["wait_ms_per_step"][0]) and got["wait_ms"].value > 4.0
    assert got["transfer_us"].value == pytest.approx(s["collectives"]["by_kind"]["all_reduce"]["time_us"] / 32)
    assert got["straggler_cause"].evidence["rank"] == 1
    for q in p.questions:
        c = got[q.key]
        assert questions.grade(q, str(c.value), c).correct, q.key
        assert not questions.grade(q, wrong_answer(q, c.value), c).correct, q.key


def test_collective_numbers_follow_nccl_tests(straggler_recording):
    ev = straggler_recording
    b = QM.collective_metric(ev, "bytes", kind="all_reduce").value
    assert b == (8 * 4096 * 4096 + 8 * 4096) * 2 / 8  # DDP buckets: the 8 layers' weights and biases in 8 calls
    alg = QM.collective_metric(ev, "algbw_gbps").value
    assert QM.collective_metric(ev, "busbw_gbps").value == pytest.approx(alg)  # all_reduce on 2 ranks: factor 1
    assert alg > 50 and QM.collective_metric(ev, "per_step").value == 8
    assert QM.dominant_collective(ev).value == "all_reduce"
    assert QM.rank_metric(ev, "exposed_comm_ms", rank=1).value < QM.rank_metric(ev, "exposed_comm_ms").value
    with pytest.raises(PerflabError, match="no all_gather"):
        QM.collective_metric(ev, "bytes", kind="all_gather")
    with pytest.raises(PerflabError, match="must be one of"):
        QM.rank_metric(ev, "nonsense")
    with pytest.raises(PerflabError, match="no rank 5"):
        QM.rank_doctor_top_id(ev, rank=5)


def test_sweep_analyses(tmp_path):
    def pts(lat):
        return [{"batch": b, "latency_ms": t, "forward_ms": t, "throughput": b / t * 1e3} for b, t in lat]

    doc = {"schema": distributed.SWEEP_SCHEMA, "knee_fraction": 0.8,
           "gpus": {"1": pts([(1, 0.10), (8, 0.11), (64, 0.2), (512, 1.6)]),
                    "2": pts([(1, 0.15), (8, 0.16), (64, 0.18), (512, 0.9)])}}
    (tmp_path / "sweep.json").write_text(json.dumps(doc))
    ev = replay.Evidence(tmp_path)
    assert QM.rank_sweep_speedup(ev, batch=8).value == pytest.approx(0.11 / 0.16)
    assert QM.rank_sweep_speedup(ev, batch=512).value == pytest.approx(1.6 / 0.9)
    assert QM.rank_sweep_knee(ev, gpus=2).value == 512      # 64/0.18 = 356k/s < 80 % of 569k/s
    assert QM.rank_sweep_point(ev, batch=64, gpus=1, field="latency_ms").value == 0.2
    with pytest.raises(PerflabError, match="no 4-GPU points"):
        QM.rank_sweep_knee(ev, gpus=4)
    assert distributed.plot_sweep(doc, tmp_path / "s.png").stat().st_size > 1000
    with pytest.raises(PerflabError, match="no multi-GPU batch sweep"):
        QM.rank_sweep_knee(replay.Evidence(tmp_path / "none"))


# -- every recorded multi-GPU puzzle, replayed from its artifacts ----------------------------------------------
RECORDED = [pid for pid in PUZZLES if replay.recording(puzzle(pid)).has("slow")]


@pytest.mark.parametrize("pid", RECORDED)
def test_recording_replays(pid):
    p = puzzle(pid)
    ev = replay.recording(p)
    manifest = ev.manifest()
    assert manifest["world_size"] == 2 and manifest["backend"] == "nccl" and manifest["gpu"]
    m = ev.measurements()
    assert m["speedup"]["ci_low"] >= p.check.speedup and m["check"]["solution"]["passed"]
    assert not m["check"]["starter"]["passed"]
    for variant in ("slow", "solution"):
        assert [t.rank for t in ev.ranks(variant)] == [0, 1]
    # first overall, or first at the level the puzzle's cause question asks about (the top-down answer)
    cause = next((q for q in p.questions if q.analysis == "doctor_top_id"), None)
    level = (cause.args or {}).get("level", "") if cause is not None else ""
    assert [f.id for f in ev.report("slow").findings if not level or f.level == level][0] == p.check.planted
    for rep in distributed.diagnose_ranks(ev.trace_path("solution")):
        assert {f.id: f.severity for f in rep.findings}.get(p.check.planted) not in ("high", "medium")
    for q in p.questions:
        c = questions.compute(q, ev)
        assert questions.grade(q, str(c.value), c).correct, q.key
        assert not questions.grade(q, wrong_answer(q, c.value), c).correct, q.key


@pytest.mark.parametrize("pid", RECORDED)
def test_cli_replays_answers_and_doctors_each_rank(pid, capsys):
    from perflab.__main__ import main

    p = puzzle(pid)
    ev = replay.recording(p)
    answers = [f"{q.key}={questions.compute(q, ev).value}" for q in p.questions]
    assert main(["answer", pid, *[x for a in answers for x in ("--answer", a)]]) in (0, None)
    assert f"{len(answers)}/{len(answers)} right" in capsys.readouterr().out
    assert main(["run", pid, "--replay", "--json"]) in (0, None)
    run = json.loads(capsys.readouterr().out)
    assert run["mode"] == "replay" and run["summary"]["steps"] == p.profile.steps
    assert main(["doctor", str(ev.trace_path("slow")), "--rank", "1", "--json"]) in (0, None)
    rep = json.loads(capsys.readouterr().out)
    assert rep["source"]["rank"] == 1 and rep["source"]["ranks"] == [0, 1] and "multigpu" in rep["analyses"]
    assert main(["doctor", str(ev.trace_path("slow")), "--rank", "7"]) == 2


def test_cli_on_a_recording_of_ranks(tmp_path, monkeypatch, capsys):
    """`perflab run --replay` and `answer` on a multi-GPU puzzle whose recording is the fixture traces."""
    from perflab.__main__ import main

    src = puzzle("straggler").folder
    folder = tmp_path / "cat" / "99-zz-ranks"
    shutil.copytree(src, folder, ignore=shutil.ignore_patterns("artifacts", "__pycache__"))
    toml = (folder / "puzzle.toml").read_text(encoding="utf-8")
    (folder / "puzzle.toml").write_text(toml.replace('id = "straggler"', 'id = "zz-ranks"')
                                        .replace("order = 710", "order = 990"), encoding="utf-8")
    art = folder / "artifacts"
    shutil.copytree(FIXTURES / "straggler", replay.ranks_dir(art, "slow"))
    shutil.copytree(FIXTURES / "ddp", replay.ranks_dir(art, "solution"))
    (art / "manifest.json").write_text((FIXTURES / "manifest.json").read_text())
    (art / "measurements.json").write_text(json.dumps({"slow": {"median_ms": 9.5}, "solution": {"median_ms": 7.3},
                                                       "speedup": {"point": 1.3}}))
    monkeypatch.setenv("PERFLAB_CATALOG", str(tmp_path / "cat"))
    assert main(["run", "zz-ranks", "--replay"]) in (0, None)
    out = capsys.readouterr().out
    assert "rank 0: step" in out and "rank 1: step" in out and "slow.ranks" in out
    assert main(["answer", "zz-ranks", "--answer", "straggler=1", "--answer", "cause=host-sync"]) == 1
    out = capsys.readouterr().out
    assert "1/2 right" in out and "--reveal cause" in out and "load-imbalance" not in out  # not given away
    assert main(["answer", "zz-ranks", "--reveal", "cause"]) == 0
    assert "revealed cause: load-imbalance" in capsys.readouterr().out


def test_a_job_past_its_timeout_is_stopped_with_its_workers(tmp_path):
    """torchrun runs in its own process group: on timeout the launcher and every worker it started stop."""
    import os
    import sys
    import time

    pid_file = tmp_path / "worker.pid"
    code = ("import subprocess, sys, time\n"
            f"w = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            f"open({str(pid_file)!r}, 'w').write(str(w.pid))\n"
            "time.sleep(60)\n")
    t0 = time.monotonic()
    with (tmp_path / "log").open("w") as log:
        assert distributed._run_group([sys.executable, "-c", code], log, dict(os.environ), timeout=3) == 124
    assert time.monotonic() - t0 < 30
    worker = int(pid_file.read_text())
    for _ in range(50):
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the worker outlived the timeout")
