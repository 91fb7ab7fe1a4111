"""Nsight Compute's own guided analysis (its rule results) read from a report, mapped to taxonomy ids and
shown beside our findings: in the terminal, in --json under analyses, in --html."""
from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from test_ncu_fixtures import DATA, has_ncu_report, report as rep_path
from perflab.doctor.finding import Finding
from perflab.doctor.ncu import diagnose_ncu
from perflab.doctor.ncu_guided import compare, taxonomy_for
from perflab.trace.nsight_compute.ncu_rules import clean, normalize

needs_rep = pytest.mark.skipif(not has_ncu_report(), reason="the ncu_report module is not installed")


def _rule(rule, title="", kind=2, speedup=None, scope=2, message="m"):
    return normalize({"rule_identifier": rule, "name": rule, "section_identifier": "S",
                      "rule_message": {"title": title, "message": message, "type": kind},
                      "speedup_estimation": {"type": scope, "speedup": speedup} if speedup is not None else None})


def _finding(fid, severity="high"):
    gain = 50.0 if severity != "info" else 0.0
    return Finding(id=fid, severity=severity, gain_pct=gain, evidence={"kernel": "k", "kernel_gain_pct": gain},
                   fix="fix it somehow, please")


def test_rule_messages_are_text_without_markup_or_control_characters():
    text = ("Look at @section:WarpStateStats:Warp State Statistics@ and the "
            "@url:CUDA Best Practices Guide:https://docs.nvidia.com/x#y@ at PC @source:7f5e:0x7f5e@\x1b[31m.")
    assert clean(text) == ("Look at Warp State Statistics and the CUDA Best Practices Guide at PC the source "
                           "line[31m.")
    r = _rule("LaunchConfiguration", "Small Grid", speedup=33.3, scope=2)
    assert (r["kind"], r["speedup_pct"], r["speedup_scope"]) == ("optimization", 33.3, "global")
    assert _rule("SOLBottleneck", kind=3)["kind"] == "warning" and _rule("X", kind=1)["kind"] == "ok"


@pytest.mark.parametrize("rule,title,message,expected", [
    ("LaunchConfiguration", "Small Grid", "", "small-grid"),
    ("LaunchConfiguration", "Tail Effect", "", "tail-effect"),
    ("SOLBottleneck", "", "values below 60.0% of peak typically indicate latency issues", "latency-bound"),
    ("SOLBottleneck", "High Memory Throughput", "", "memory-bound"),
    ("AchievedOccupancy", "", "", "low-occupancy"),
    ("CPIStall", "Not Selected Stalls", "", "compute-bound"),
    ("CPIStallBarrier", "", "", "latency-bound"),
    ("MemoryCacheAccessPattern", "L2 Local Store Access Pattern", "", "register-spill"),
    ("MemoryCacheAccessPattern", "DRAM Global Load Access Pattern", "", "uncoalesced-access"),
    ("SharedMemoryConflicts", "Shared Load Bank Conflicts", "", "bank-conflicts"),
    ("ThreadDivergence", "", "", "warp-divergence"),
    ("MemoryL2Compression", "Low Compression Rate", "", None),
    ("SomethingNew", "", "", None),
])
def test_ncu_rules_map_to_taxonomy_ids(rule, title, message, expected):
    assert taxonomy_for(_rule(rule, title, message=message)) == expected


def test_compare_says_same_akin_or_differ_and_what_only_one_side_flags():
    rules = [_rule("LaunchConfiguration", "Small Grid", speedup=33), _rule("AchievedOccupancy", speedup=88),
             _rule("UncoalescedGlobalAccess", speedup=5), _rule("SOLFPRoofline", kind=1)]
    same = compare(rules, [_finding("small-grid")])
    assert same["status"] == "same" and same["agree"] and "Small Grid" in same["note"]
    assert same["only_ncu"] == ["uncoalesced-access"] and not same["only_ours"]
    assert [r["rule"] for r in same["rules"]][:2] == ["AchievedOccupancy", "LaunchConfiguration"]  # by estimate
    assert all(r["rule"] != "SOLFPRoofline" for r in same["rules"])  # an "ok" note is no problem
    akin = compare([_rule("CPIStall", "Long Scoreboard Stalls", speedup=90)], [_finding("atomic-contention")])
    assert akin["status"] == "akin" and "ncu says latency-bound" in akin["note"]
    differ = compare([_rule("MemoryCacheAccessPattern", "L1TEX Global Store Access Pattern", speedup=43)],
                     [_finding("no-tensor-cores")])
    assert differ["status"] == "differ" and not differ["agree"] and differ["only_ours"] == ["no-tensor-cores"]
    healthy = compare([_rule("MemoryL2Compression", "Low Compression Rate", speedup=90)],
                      [_finding("healthy", "info"), _finding("memory-bound", "info")])
    assert healthy["status"] == "same"  # a rule with no taxonomy id is shown, not counted as a difference
    # judged per kernel: a kernel holding 1 % of the report's time still has its own problem
    small = Finding(id="memory-bound", severity="info", gain_pct=0.2, fix="fix it somehow, please",
                    evidence={"kernel": "k", "kernel_gain_pct": 14.0, "kernel_time_share_pct": 1.0})
    assert compare([_rule("CPIStall", "Long Scoreboard Stalls", speedup=30)], [small])["status"] == "akin"


@needs_rep
def test_rule_results_are_read_from_a_report_and_compared():
    report = diagnose_ncu(rep_path("bank_conflicts"))
    kernel = report.analyses["kernels"][0]
    cmp = kernel["ncu_rules"]
    assert cmp["status"] == "same" and cmp["rules"][0]["rule"] in ("SharedMemoryConflicts", "UncoalescedSharedAccess")
    assert all("@section" not in r["message"] and "@url" not in r["message"] for r in cmp["rules"])
    assert "ncu_rules_note" not in report.analyses


@needs_rep
def test_the_terminal_json_and_html_show_ncu_beside_ours(tmp_path, capsys):
    from perflab.__main__ import main
    from perflab.report.html import report_html
    from perflab.report.terminal import render_report

    report = diagnose_ncu(rep_path("tail_effect"))
    console = Console(record=True, width=200, file=io.StringIO())
    render_report(report, console)
    text = console.export_text()
    assert "what limits each kernel" in text and "Nsight Compute's own analysis beside ours" in text
    assert "LaunchConfiguration: Tail Effect" in text and "-> tail-effect" in text
    assert "waves_per_sm=" in text and "kernel_time_share_pct" not in text  # deciding numbers, not context
    page = report_html(report)
    assert 'id="ncu-limits"' in page and 'id="ncu-rules"' in page and "LaunchConfiguration: Tail Effect" in page
    assert main(["doctor", str(rep_path("tail_effect")), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    k = doc["analyses"]["kernels"][0]
    assert k["limits"]["launch"]["waves_per_sm"] == pytest.approx(1.07, abs=0.01)
    assert k["ncu_rules"]["status"] == "same" and k["ncu_rules"]["rules"]


def test_a_csv_export_has_the_limits_but_says_it_has_no_ncu_rules():
    report = diagnose_ncu(DATA / "low_occupancy.csv")
    console = Console(record=True, width=200, file=io.StringIO())
    from perflab.report.terminal import render_report

    render_report(report, console)
    text = console.export_text()
    assert "what limits each kernel" in text and "3 of 3 % (shared memory)" in text
    assert "a CSV export carries none" in text
