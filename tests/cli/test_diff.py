"""`perflab diff`: the comparison (analysis/reports/compare.py), its renderers and the command, on the puzzles'
recorded H100 traces (slow vs solution) and on synthetic traces with known numbers."""
import json
import shutil
from pathlib import Path

import pytest

from conftest import FIXED_KERNELS, SLOW_KERNELS, make_trace, write_trace
from perflab.__main__ import main
from perflab.analysis.reports.compare import SCHEMA, compare
from perflab.doctor.sides import load_run
from perflab.history import resolve
from perflab.analysis.work.kernels import classify, kernel_breakdown
from perflab.analysis.reports.summary import evidence_summary
from perflab.errors import PerflabError
from perflab.report.diff import diff_json, render_diff

CATALOG = Path(__file__).resolve().parents[2] / "src" / "perflab" / "catalog"


def artifact(slug: str, variant: str) -> Path:
    return CATALOG / slug / "artifacts" / f"{variant}.trace.json.gz"


@pytest.fixture(scope="module")
def runs():
    """Every recorded puzzle, both variants, loaded and diagnosed once."""
    cache = {}

    def get(slug: str, variant: str):
        key = (slug, variant)
        if key not in cache:
            cache[key] = load_run(artifact(slug, variant))
        return cache[key]
    return get


@pytest.mark.parametrize("slug,planted", [("01-launch-overhead", "launch-overhead"), ("02-host-sync", "host-sync"),
                                          ("03-pageable-copies", "pageable-memcpy")])
def test_the_planted_finding_disappears_and_the_step_gets_faster(runs, slug, planted):
    before, after = runs(slug, "slow"), runs(slug, "solution")
    d = compare(before, after)
    assert planted in d.by_status("disappeared")
    assert d.finding(planted).before_severity == "high" and d.finding(planted).after_severity is None
    # the step time of each side is the doctor's own (evidence summary) median step time
    for side, run in ((d.before, before), (d.after, after)):
        assert side.step.median_ms == pytest.approx(evidence_summary(run.trace)["step_time_ms"], rel=1e-9)
        assert side.step.min_ms <= side.step.p25_ms <= side.step.median_ms <= side.step.p75_ms <= side.step.max_ms
        assert side.step.steps == len(run.windows.steps) == len(side.step.times_ms)
    assert d.speedup == pytest.approx(d.before.step.median_ms / d.after.step.median_ms)
    assert d.speedup > 3
    assert d.metric("gpu_busy_pct").after > d.metric("gpu_busy_pct").before
    assert d.verdict.startswith(f"After is {d.speedup:.2f}× faster per profiled step")
    assert planted in d.verdict


def test_launch_overhead_fix(runs):
    d = compare(runs("01-launch-overhead", "slow"), runs("01-launch-overhead", "solution"))
    assert d.speedup > 8  # ~45 ms -> ~2.5 ms on the H100 recording
    assert d.finding("launch-overhead").status == "disappeared"
    # the same kernels run in both: GPU time per step barely moves, the idle time is what went away
    gpu = d.metric("gpu_time_per_step_us")
    assert gpu.after == pytest.approx(gpu.before, rel=0.25)


def test_verdict_words(runs):
    d = compare(runs("02-host-sync", "slow"), runs("02-host-sync", "solution"))
    new = d.verdict.split("New: ")[1].split(".")[0] if "New: " in d.verdict else ""
    assert "healthy" not in new  # healthy is no problem that appeared
    if "healthy" in d.by_status("appeared"):
        assert d.verdict.endswith("The doctor now finds it healthy.")
    back = compare(runs("02-host-sync", "solution"), runs("02-host-sync", "slow"))
    assert back.speedup == pytest.approx(1 / d.speedup)
    assert back.verdict.startswith(f"After is {d.speedup:.2f}× slower per profiled step")
    assert "host-sync" in back.by_status("appeared") and "New: host-sync" in back.verdict


def test_pageable_copies_fix_moves_the_memcpy_time(runs):
    d = compare(runs("03-pageable-copies", "slow"), runs("03-pageable-copies", "solution"))
    memcpy = d.category("memcpy")
    assert memcpy.after < memcpy.before / 3
    names = {k.name: k for k in d.kernels}
    pageable = next(k for n, k in names.items() if "Pageable" in n)
    pinned = next(k for n, k in names.items() if "Pinned" in n)
    assert pageable.after_us == 0 and pageable.before_us > 0
    assert pinned.before_us == 0 and pinned.after_us > 0


def test_per_step_numbers_agree_with_the_kernel_breakdown(runs):
    before, after = runs("02-host-sync", "slow"), runs("02-host-sync", "solution")
    d = compare(before, after, top=5)
    assert len(d.kernels) == 5
    changes = [abs(k.change_us) for k in d.kernels]
    assert changes == sorted(changes, reverse=True)
    for side, run in (("before", before), ("after", after)):
        kb = kernel_breakdown(run.trace, run.windows, top=1 << 20)
        n = len(run.windows.steps)
        for k in d.kernels:
            row = next((r for r in kb["by_name"] if r["name"] == k.name), None)
            expected = row["total_us"] / n if row else 0.0
            assert getattr(k, f"{side}_us") == pytest.approx(expected)
        cats = sum(getattr(c, side) for c in d.categories)
        assert cats == pytest.approx(getattr(d.metric("gpu_time_per_step_us"), side))
        assert cats == pytest.approx(kb["gpu_time_us"] / n)


def test_a_trace_against_itself_changes_nothing(runs):
    run = runs("02-host-sync", "slow")
    d = compare(run, run)
    assert d.speedup == pytest.approx(1.0)
    assert all(m.change == 0 and m.better is None for m in d.metrics + d.categories)
    assert all(f.status == "unchanged" for f in d.findings) and d.findings
    assert d.verdict.startswith("Profiled step time is unchanged")


def test_synthetic_traces_with_known_numbers(tmp_path):
    slow = write_trace(tmp_path / "slow.json.gz", make_trace(steps=4, kernels=SLOW_KERNELS, step_us=2000.0, syncs=2))
    fast = write_trace(tmp_path / "fast.json.gz", make_trace(steps=5, kernels=FIXED_KERNELS, step_us=1000.0))
    d = compare(load_run(slow), load_run(fast))
    assert d.before.step.median_ms == pytest.approx(2.0)
    assert d.after.step.median_ms == pytest.approx(1.0)
    assert d.speedup == pytest.approx(2.0)
    assert d.before.step.spread_pct == pytest.approx(0.0, abs=1e-6)
    # per step, whatever the step count (4 vs 5)
    expected = {}
    for side, kernels in (("before", SLOW_KERNELS), ("after", FIXED_KERNELS)):
        for name, dur in kernels:
            expected.setdefault(classify(name), {"before": 0.0, "after": 0.0})[side] += dur
    for cat, want in expected.items():
        got = d.category(cat)
        assert (got.before, got.after) == (pytest.approx(want["before"]), pytest.approx(want["after"]))
    add = next(k for k in d.kernels if k.name == "elementwise_add_kernel")
    assert (add.before_us, add.after_us, add.before_count, add.after_count) == (200.0, 0.0, 40.0, 0.0)
    assert d.metric("syncs_per_step").before == pytest.approx(2.0) and d.metric("syncs_per_step").after == 0


def test_json_schema_round_trip(runs):
    d = compare(runs("01-launch-overhead", "slow"), runs("01-launch-overhead", "solution"))
    doc = json.loads(diff_json(d))
    assert doc["schema"] == SCHEMA == "perflab.diff/1"
    assert set(doc) >= {"verdict", "speedup", "before", "after", "metrics", "categories", "kernels", "findings",
                        "notes"}
    assert doc["speedup"] == pytest.approx(d.speedup)
    assert doc["before"]["step"]["median_ms"] == pytest.approx(d.before.step.median_ms)
    assert doc["before"]["step"]["spread_pct"] == pytest.approx(d.before.step.spread_pct)
    step = next(m for m in doc["metrics"] if m["name"] == "step_time_ms")
    assert step["ratio"] == pytest.approx(1 / d.speedup)
    assert {f["id"]: f["status"] for f in doc["findings"]}["launch-overhead"] == "disappeared"


def test_terminal_rendering(runs, capsys):
    from rich.console import Console

    d = compare(runs("03-pageable-copies", "slow"), runs("03-pageable-copies", "solution"))
    console = Console(width=140, record=True)
    render_diff(d, console)
    text = console.export_text()
    assert d.verdict.split(" (")[0] in text
    assert "pageable-memcpy" in text and "disappeared" in text and "memcpy" in text


# ---- run history ---------------------------------------------------------------------------------------

def test_history_refs(tmp_path):
    from perflab.puzzles.engine.progress import ProgressDB

    with pytest.raises(PerflabError, match="no run history"):
        resolve("run:1")
    folders = []
    for i, variant in enumerate(("slow", "solution")):
        folder = tmp_path / f"run{i}"
        folder.mkdir()
        shutil.copy(artifact("02-host-sync", variant), folder / f"{variant}.trace.json.gz")
        folders.append(folder)
    with ProgressDB() as db:
        db.add_run("host-sync", "slow", "live", str(folders[0]), 10.9)
        db.add_run("host-sync", "slow", "replay", None, 10.9)  # a replay keeps no trace: skipped
        db.add_run("host-sync", "solution", "live", str(folders[1]), 2.06)
    path, label = resolve("run:1")
    assert path == folders[1] / "solution.trace.json.gz" and "host-sync solution" in label
    assert resolve("run:2")[0] == folders[0] / "slow.trace.json.gz"
    with pytest.raises(PerflabError, match="2 recorded run"):
        resolve("run:3")
    d = compare(load_run("run:2"), load_run("run:1"))
    assert "host-sync" in d.by_status("disappeared")


# ---- the command ---------------------------------------------------------------------------------------

def test_cli_json_html_and_plot(tmp_path, capsys):
    before, after = str(artifact("01-launch-overhead", "slow")), str(artifact("01-launch-overhead", "solution"))
    html, plot = tmp_path / "out" / "diff.html", tmp_path / "diff.png"
    assert main(["diff", before, after, "--html", str(html)]) == 2  # a folder that does not exist is not made
    assert "the folder" in capsys.readouterr().err and not html.parent.exists()
    html.parent.mkdir()
    assert main(["diff", before, after, "--json", "--html", str(html), "--plot", str(plot)]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["schema"] == "perflab.diff/1" and doc["speedup"] > 8
    assert f"wrote {html}" in err and f"wrote {plot}" in err
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = html.read_text()
    assert doc["verdict"].split(" (")[0] in page and "<svg" in page and "launch-overhead" in page
    # an existing output is never replaced without --force, and nothing is computed first
    before_mtime = html.stat().st_mtime_ns
    assert main(["diff", before, after, "--html", str(html)]) == 2
    assert "exists: pass --force" in capsys.readouterr().err
    assert html.stat().st_mtime_ns == before_mtime
    assert main(["diff", before, after, "--html", str(html), "--force"]) == 0
    capsys.readouterr()


@pytest.mark.parametrize("args,message", [
    (["nope.json.gz", "x.json"], "no such file or folder"),
    (["run:0", "run:1"], "counted from 1"),
])
def test_cli_bad_input_is_one_line(args, message, capsys):
    assert main(["diff", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_cli_refuses_a_non_trace(capsys):
    ncu = Path(__file__).parents[1] / "data" / "ncu" / "v_gemv.csv"
    assert main(["diff", str(ncu), str(artifact("02-host-sync", "slow"))]) == 2
    assert "compares traces (Kineto or Nsight Systems)" in capsys.readouterr().err


def test_plot_suffix_is_checked(tmp_path, capsys):
    a = str(artifact("02-host-sync", "slow"))
    assert main(["diff", a, a, "--plot", str(tmp_path / "x.txt")]) == 2
    assert ".png, .svg or .pdf" in capsys.readouterr().err
