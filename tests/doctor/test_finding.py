import pytest

from perflab.doctor.finding import Finding, Report, rank


def make(fid, severity, gain):
    return Finding(id=fid, severity=severity, gain_pct=gain, evidence={}, fix="")


def test_unknown_id_is_rejected():
    with pytest.raises(ValueError, match="not a taxonomy id .perflab taxonomy lists them"):
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
    assert d["schema"] == "perflab.doctor/2" and d["findings"][0]["id"] == "healthy"


def test_every_taxonomy_id_is_known_with_its_level():
    """The ids of ../shared/TAXONOMY.md (when present) are exactly the doctor's, at the same level."""
    import re
    from pathlib import Path

    from perflab.doctor.finding import TAXONOMY_IDS

    table = Path(__file__).resolve().parents[3] / "shared" / "TAXONOMY.md"
    if not table.is_file():
        pytest.skip("../shared/TAXONOMY.md is not here")
    rows = re.findall(r"^\| `([a-z0-9-]+)` \| ([A-Za-z-]+) \|", table.read_text(), re.M)
    assert rows
    shared = dict(rows)
    assert set(shared) <= set(TAXONOMY_IDS), sorted(set(shared) - set(TAXONOMY_IDS))
    assert all(TAXONOMY_IDS[i] == level for i, level in shared.items())
