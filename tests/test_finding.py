import pytest

from perflab.doctor.finding import Finding, Report, rank


def make(fid, severity, gain):
    return Finding(id=fid, severity=severity, gain_pct=gain, evidence={}, fix="")


def test_unknown_id_is_rejected():
    with pytest.raises(ValueError, match="TAXONOMY"):
        make("slow-stuff", "high", 10)


def test_level_comes_from_taxonomy():
    assert make("host-sync", "high", 1).level == "system"
    assert make("bank-conflicts", "low", 1).level == "kernel"


def test_rank_orders_by_severity_then_gain_then_level():
    findings = [make("bank-conflicts", "high", 40), make("host-sync", "high", 40),
                make("gpu-idle", "medium", 90), make("launch-overhead", "high", 60)]
    assert [f.id for f in rank(findings)] == ["launch-overhead", "host-sync", "bank-conflicts", "gpu-idle"]


def test_report_json_has_schema():
    rep = Report(source={"kind": "kineto"}, verdict="v", findings=[make("healthy", "info", 0)])
    d = rep.to_dict()
    assert d["schema"] == "perflab.doctor/1" and d["findings"][0]["id"] == "healthy"
