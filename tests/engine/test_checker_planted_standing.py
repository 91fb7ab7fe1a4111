"""checker.planted_standing: when does a fix's trace still hold the planted finding?"""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from perflab.doctor.finding import Finding
from perflab.puzzles.engine import catalog, checker
from perflab.puzzles.evidence import trace as trace_evidence

KINETO = Path(__file__).parents[1] / "data" / "kineto"


def finding(fid: str, severity: str) -> Finding:
    return Finding(id=fid, severity=severity, gain_pct=0.0, evidence={}, fix="")


@pytest.mark.parametrize("ranked,standing", [
    ([("host-compute", "high"), ("launch-overhead", "medium")], True),
    ([("launch-overhead", "high"), ("host-compute", "high")], True),      # high anywhere still holds the step
    ([("host-compute", "medium"), ("gpu-idle", "low")], True),            # medium and still the top finding
    ([("launch-overhead", "high"), ("host-compute", "medium")], False),   # a residue behind a new bottleneck
    ([("launch-overhead", "high"), ("host-compute", "low")], False),
    ([("launch-overhead", "high")], False),
])
def test_high_anywhere_or_medium_on_top_still_stands(ranked, standing):
    found = checker.planted_standing([finding(i, s) for i, s in ranked], "host-compute")
    assert bool(found) is standing


def test_a_busy_hosts_fix_trace_passes_where_the_slow_trace_does_not():
    """with-stack's solution profiled on a busy H100 host (one descheduled call): host-compute medium
    behind launch-overhead high. The same puzzle's recorded slow trace holds it high and first."""
    puzzle = SimpleNamespace(check=SimpleNamespace(planted="host-compute"))
    fixed = trace_evidence.planted_evidence(puzzle, KINETO / "h100_busy_host_stray_call.trace.json.gz")
    assert fixed.ok and fixed.found[:2] == ["launch-overhead (high)", "host-compute (medium)"], fixed.found
    assert fixed.residue
    slow = catalog.find(catalog.load_catalog(), "with-stack").artifacts / "slow.trace.json.gz"
    held = trace_evidence.planted_evidence(puzzle, slow)
    assert not held.ok and not held.residue


@pytest.mark.parametrize("ok,residue,found,verdict", [
    (True, True, ["launch-overhead (high)", "host-compute (medium)"], "host-compute no longer the bottleneck"),
    (True, False, ["launch-overhead (high)", "host-compute (low)"], "host-compute gone"),
    (False, False, ["host-compute (high)"], "host-compute still there"),
])
def test_the_check_says_whether_the_finding_went_or_only_stopped_leading(ok, residue, found, verdict):
    from rich.console import Console

    from perflab.cli.puzzles import _render_check

    r = checker.CheckResult("with-stack", "fix.py", "cuda", checker.Correctness(True, 1),
                            evidence=checker.Evidence(ok=ok, planted="host-compute", found=found, residue=residue))
    console = Console(record=True, width=200)
    _render_check(console, r)
    assert f"planted finding {verdict} (doctor: {', '.join(found)})" in console.export_text()


def test_profiler_overheads_check_says_what_it_measured():
    """profiler-overhead's evidence is not a doctor finding, and its ratio is not a speed-up."""
    from rich.console import Console

    from perflab.cli.puzzles import _render_check
    from perflab.puzzles.engine import stats

    r = checker.CheckResult("profiler-overhead", "fix.py", "cpu", checker.Correctness(True, 1),
                            slow={"median_ms": 30.0}, fixed={"median_ms": 58.0},
                            speed=stats.SpeedupResult(point=0.52, ci_low=0.45, ci_high=0.58, bar=0.909, passed=False,
                                                      n=40, statistic="median (bare / profiled)", confidence=0.95),
                            evidence=checker.Evidence(ok=True, planted="host-compute", what="the profile names the same "
                                                      "hot spot every step", found=["named workload.py:hash_ids 5/5"]))
    console = Console(record=True, width=200)
    _render_check(console, r)
    text = console.export_text()
    assert "bare / profiled step time 0.52×" in text and "speed-up" not in text
    assert "the profile names the same hot spot every step: yes" in text and "planted finding" not in text


def test_over_ranks_a_medium_residue_on_one_rank_passes_as_a_residue(monkeypatch, tmp_path):
    from perflab.puzzles.evidence import multirank as distributed

    reports = [SimpleNamespace(source={"rank": 0}, findings=[finding("launch-overhead", "high")]),
               SimpleNamespace(source={"rank": 1}, findings=[finding("launch-overhead", "high"),
                                                             finding("host-compute", "medium")])]
    monkeypatch.setattr(distributed, "diagnose_ranks", lambda folder: reports)
    puzzle = SimpleNamespace(check=SimpleNamespace(planted="host-compute"))
    ev = distributed.planted_evidence(puzzle, tmp_path)
    assert ev.ok and ev.residue and "rank 1: host-compute (medium)" in ev.found
    reports[1].findings.reverse()  # host-compute ranked first on rank 1: it stands there
    ev = distributed.planted_evidence(puzzle, tmp_path)
    assert not ev.ok and not ev.residue
