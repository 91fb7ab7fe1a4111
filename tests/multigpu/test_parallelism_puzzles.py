"""The parallelism puzzles (catalog 74-77: pipeline-bubble, unbucketed-allreduce, ring-attention,
expert-skew) on the CPU: their fix check under torchrun with gloo on 2 ranks (outputs compared rank by
rank), their tolerances, and the analyses their questions add (questions/parallelism.py) on the H200 x2
fixture traces. Spec, one-rank agreement and the replay of a recording: tests/multigpu/test_multigpu_puzzles.py.
"""
from __future__ import annotations

import importlib.util
import itertools
import json
from pathlib import Path

import pytest

from perflab.errors import PerflabError
from perflab.puzzles.engine import catalog
from perflab.puzzles.evidence import multirank as distributed
from perflab.puzzles.questions import parallelism as QP

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "data" / "multigpu" / "h200x2"
NEW = ["pipeline-bubble", "unbucketed-allreduce", "ring-attention", "expert-skew"]
_ids = itertools.count()


def load(path: Path):
    spec = importlib.util.spec_from_file_location(f"par_test_{next(_ids)}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("pid", NEW)
def test_fix_check_on_two_gloo_ranks(pid, tmp_path):
    """The solution against the slow workload on 2 gloo ranks: the same outputs on both, timed, re-profiled."""
    pytest.importorskip("torch")
    from perflab.trace.kineto import load_ranks

    p = catalog.get(pid)
    r = distributed.check(p, p.file("solution"), tmp_path / "check", device="cpu", seed=7, reps=3)
    assert r.correctness.ok, r.correctness.message
    assert r.speed is not None and r.evidence is not None and r.evidence.planted == p.check.planted
    assert [t.rank for t in load_ranks(tmp_path / "check" / "mine.ranks")] == [0, 1]


@pytest.mark.parametrize("pid", NEW)
def test_tolerance_catches_a_wrong_output(pid):
    """On one rank: the solution's output scaled by 0.9 (a dropped micro-batch, a lost head...) fails the check."""
    torch = pytest.importorskip("torch")
    from perflab.puzzles.engine import checker

    p = catalog.get(pid)
    slow, sol = load(p.file("slow")), load(p.file("solution"))
    expected = checker.snapshot(slow.step(slow.setup("cpu", 3)))
    got = checker.snapshot(sol.step(sol.setup("cpu", 3)))
    assert checker.compare(expected, got, p) == ""
    wrong = [(path, v * 0.9 if isinstance(v, torch.Tensor) else v) for path, v in got]
    assert checker.compare(expected, wrong, p) != ""


def test_expert_placement_balances_the_skewed_loads():
    torch = pytest.importorskip("torch")
    p = catalog.get("expert-skew")
    slow, sol = load(p.file("slow")), load(p.file("solution"))
    assert slow.contiguous(8, 2) == [0, 0, 0, 0, 1, 1, 1, 1]
    loads = [300, 330, 310, 320, 5260, 4930, 2370, 2560]
    owner = sol.balanced(loads, 2)
    per_rank = [sum(n for n, r in zip(loads, owner) if r == k) for k in (0, 1)]
    assert abs(per_rank[0] - per_rank[1]) / sum(loads) < 0.02
    contiguous = [sum(n for n, r in zip(loads, slow.contiguous(8, 2)) if r == k) for k in (0, 1)]
    assert contiguous[1] / sum(loads) > 0.9              # the planted skew: nearly every token on rank 1
    state = slow.build("cpu", 1)
    routed = torch.bincount(slow.route(state), minlength=8)
    assert routed[4:].sum() > 0.6 * routed.sum()         # the router favours experts 4-7 at smoke size too


def test_idle_share_and_least_overlapped_rank_on_fixture_traces(straggler_recording):
    from perflab.analysis.multigpu.collectives import multirank_summary

    ev = straggler_recording
    rows = {r["rank"]: r for r in multirank_summary(ev.ranks("slow"))["per_rank"]}
    idle = {r: 100.0 * (1 - row["compute_ms"] / row["step_ms"]) for r, row in rows.items()}
    got = QP.rank_idle_pct(ev)
    assert got.value == pytest.approx(max(idle.values())) and got.evidence["rank"] == max(idle, key=idle.get)
    assert QP.rank_idle_pct(ev, rank=1).value == pytest.approx(idle[1])
    assert 0.0 < got.value < 100.0
    overlap = {r: row["comm_overlap_pct"] for r, row in rows.items()}
    least = QP.rank_metric_min(ev, "comm_overlap_pct")
    assert least.value == pytest.approx(min(overlap.values()))
    assert least.evidence["rank"] == min(overlap, key=overlap.get)
    with pytest.raises(PerflabError, match="no rank 5"):
        QP.rank_idle_pct(ev, rank=5)
    with pytest.raises(PerflabError, match="must be one of"):
        QP.rank_metric_min(ev, "nonsense")


# -- the interconnect lesson: a recorded sweep per NCCL setting ----------------------------------------------
def _sweep(rows):
    return {"rows": [{"bytes": b, "time_us": t, "busbw_gbps": b / t / 1e3, "algbw_gbps": b / t / 1e3} for b, t in rows]}


def test_interconnect_table_lines_up_the_settings():
    from perflab.analysis.multigpu import interconnect as IC

    doc = {"schema": IC.SCHEMA, "gpus": 2, "settings": {
        "default": {"env": {}, "sweep": _sweep([(4096, 10.0), (1 << 28, 900.0)])},
        "p2p_off": {"env": {"NCCL_P2P_DISABLE": "1"}, "sweep": _sweep([(4096, 12.0), (1 << 28, 9000.0)]),
                    "transport_lines": ["NCCL version 2.28.9", "via SHM/direct/direct"]},
        "tree": {"env": {"NCCL_ALGO": "Tree"}, "error": "exit 1: no algorithm"}}}
    rows = IC.table(doc)
    assert [r["bytes"] for r in rows] == [4096, 1 << 28]
    assert rows[1]["p2p_off_vs_default"] == pytest.approx(0.1)
    assert rows[0]["p2p_off_vs_default"] == pytest.approx(10 / 12)
    assert "tree_busbw_gbps" not in rows[0]
    assert IC.point(doc, "default", 1 << 27, "time_us") == 900.0           # the nearest recorded size
    assert IC.transport(doc, "p2p_off") == ["via SHM/direct/direct"]
    with pytest.raises(PerflabError, match="no measurements: exit 1"):
        IC.point(doc, "tree", 4096)
    with pytest.raises(PerflabError, match="no setting 'ring'"):
        IC.rows_of(doc, "ring")
    with pytest.raises(PerflabError, match="not an interconnect sweep"):
        IC.table({"schema": "x"})


def test_interconnect_recorder_runs_one_setting_on_gloo(tmp_path):
    """scripts/record.py interconnect under torchrun on 2 CPU ranks (gloo ignores the NCCL settings)."""
    import subprocess
    import sys

    from perflab.analysis.multigpu import interconnect as IC

    out = tmp_path / "ic.json"
    cmd = [sys.executable, str(ROOT / "scripts" / "record.py"), "interconnect", "--out", str(out),
           "--settings", "default", "--max-bytes", "65536", "--budget-s", "120"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads(out.read_text())
    assert list(doc["settings"]) == ["default"] and doc["settings"]["default"]["sweep"]["world_size"] == 2
    assert [r["bytes"] for r in IC.table(doc)] == [4096, 65536]
    assert subprocess.run(cmd, capture_output=True, text=True).returncode == 2          # never over a file
    bad = subprocess.run([*cmd[:3], "--out", str(tmp_path / "x.json"), "--settings", "nvlink"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown setting" in bad.stderr
