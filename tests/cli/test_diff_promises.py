"""Issue 27: `perflab diff` says what each finding that disappeared had promised and what the step shows."""
from __future__ import annotations

from pathlib import Path

import pytest

from perflab.analysis.reports.compare import compare
from perflab.analysis.reports.promises import promises
from perflab.doctor.finding import Finding
from perflab.doctor.sides import load_run

CATALOG = Path(__file__).parents[2] / "src" / "perflab" / "catalog"


def _f(fid: str, gain: float, **evidence) -> Finding:
    return Finding(id=fid, severity="high", gain_pct=gain, evidence=evidence, fix="")


def test_a_kept_promise():
    (p,) = promises([_f("host-sync", 50.0)], ["host-sync"], 2.1)
    assert p.promised == pytest.approx(2.0) and "as promised" in p.verdict


def test_a_fix_that_did_less_than_promised_says_how_much_of_the_gain_it_kept():
    (p,) = promises([_f("launch-overhead", 75.0)], ["launch-overhead"], 2.5)
    assert "50% of the promised gain" in p.verdict


def test_a_stated_bound_judges_the_measurement():
    (p,) = promises([_f("atomic-contention", 80.0, speedup_at_least=5.0)], ["atomic-contention"], 160.0)
    assert p.at_least == 5.0 and "inside what it stated" in p.verdict


def test_findings_gone_together_share_the_speed_up_and_only_gone_ones_count():
    out = promises([_f("host-sync", 40.0), _f("launch-overhead", 30.0), _f("host-compute", 10.0)],
                   ["host-sync", "launch-overhead"], 3.0)
    assert [p.id for p in out] == ["host-sync", "launch-overhead", "together"]
    assert out[-1].promised == pytest.approx(1 / 0.3, rel=1e-3)


def test_recorded_host_sync_fix():
    art = CATALOG / "02-host-sync" / "artifacts"
    d = compare(load_run(str(art / "slow.trace.json.gz")), load_run(str(art / "solution.trace.json.gz")))
    (p,) = d.promises
    assert p.id == "host-sync" and p.measured == pytest.approx(d.speedup)
    assert p.promised == pytest.approx(1 / (1 - p.gain_pct / 100), rel=1e-3)
    assert "host-sync is gone" in p.verdict and d.to_dict()["promises"][0]["id"] == "host-sync"
