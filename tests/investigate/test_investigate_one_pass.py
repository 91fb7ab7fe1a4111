"""Level 2 in one run of the program: every chosen kernel profiled by one ncu command (one filter over their function
names, one launch window, the sections the kernel doctor reads), and the one report split back into the kernels'
own entries, each read at its position and checked against the launch chosen in the trace.

The walk runs with level 1 from a recorded H100 trace and a stand-in ncu (test_investigate_run.py's fixtures); the
split is checked on the H100 reports that `perflab investigate` recorded (tests/data/investigate), two kernels of
two programs put into one report as ncu writes a window of launches."""
from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest

from conftest import cli_run
from perflab.trace.nsight_compute.ncu_model import normalize_unit, parse_number
from test_investigate_run import NCU_CSV, TRACE, fake_ncu, recorded_level1, script  # noqa: F401 (fixtures)

DATA = Path(__file__).resolve().parents[1] / "data" / "investigate"
GEMM_CSV = DATA / "kernel" / "ncu-1-sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stag.csv"
NVJET_CSV = DATA / "memory" / "ncu-1-nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_TNN.csv"


def window_report(path: Path, launches: list[tuple[str, int, int]]) -> Path:
    """The recorded raw-page CSV's one launch, once per (kernel name, grid, block): what ncu writes for a window."""
    rows = list(csv.reader(NCU_CSV.open()))
    head, units, template = rows[0], rows[1], rows[2]
    out = [head, units]
    for i, (kernel, grid, block) in enumerate(launches):
        row = list(template)
        row[head.index("ID")], row[head.index("Kernel Name")] = str(i), kernel
        row[head.index("Grid Size")], row[head.index("Block Size")] = f"({grid}, 1, 1)", f"({block}, 1, 1)"
        for col, value in (("launch__grid_dim_x", grid), ("launch__grid_size", grid), ("launch__block_dim_x", block),
                           ("launch__block_size", block)):
            row[head.index(col)] = str(value)
        out.append(row)
    buf = io.StringIO()
    csv.writer(buf, quoting=csv.QUOTE_ALL).writerows(out)
    path.write_text(buf.getvalue())
    return path


def merged_report(path: Path, *reports: Path) -> Path:
    """Launches of several recorded raw-page CSVs (same columns) as one report, in the order given; a column whose
    unit differs between them is written in the first one's unit."""
    tables = [list(csv.reader(p.open())) for p in reports]
    head, units = tables[0][0], tables[0][1]
    out = [head, units]
    for i, t in enumerate(tables):
        assert t[0] == head
        for row in t[2:]:
            row = list(row)
            for c, (mine, theirs) in enumerate(zip(units, t[1])):
                value = parse_number(row[c])
                if mine != theirs and value is not None:
                    row[c] = repr(value * normalize_unit(theirs)[0] / normalize_unit(mine)[0])
            row[0] = str(len(out) - 2)
            out.append(row)
    buf = io.StringIO()
    csv.writer(buf, quoting=csv.QUOTE_ALL).writerows(out)
    path.write_text(buf.getvalue())
    return path


def chosen_level1(kernels: int):
    from perflab.doctor.investigation_system import read_level1

    return read_level1([TRACE], kernels=kernels)


def test_one_run_profiles_every_chosen_kernel_at_its_position(tmp_path, fake_ncu, recorded_level1, monkeypatch):
    from perflab.toolkit.investigate import Options, investigate
    from perflab.toolkit.ncu_metrics import DOCTOR_SECTIONS

    l1 = chosen_level1(3)
    (p,) = l1.passes
    assert len(p.members) == 3
    # the report ncu writes for that window: its launches in launch order, each chosen kernel's at its position
    launches = [("filler_kernel", 1, 32)] * p.count
    for m in p.members:
        launches[m.position] = (m.kernel, m.grid, m.block)
    monkeypatch.setenv("FAKE_NCU_REPORT", str(window_report(tmp_path / "window.csv", launches)))
    app = script(tmp_path)
    d = investigate(["python", app], tmp_path / "inv", Options(kernels=3)).to_dict()
    (call,) = [c for c in fake_ncu() if "-o" in c]          # one run of the program for the three kernels
    assert call[call.index("--kernel-name") + 1] == f"regex:{p.regex}"
    assert p.regex == "^(elementwise_kernel|softmax_warp_forward|unrolled_elementwise_kernel)$"
    assert (call[call.index("--launch-skip") + 1], call[call.index("--launch-count") + 1]) == (str(p.skip), str(p.count))
    assert "--set" not in call and [call[i + 1] for i, a in enumerate(call) if a == "--section"] == list(DOCTOR_SECTIONS)
    assert call[call.index("--kill") + 1] == "yes" and call[call.index("--clock-control") + 1] == "none"
    l2 = d["levels"][1]
    assert l2["status"] == "done" and [k["function"] for k in l2["kernels"]] == [t.function for t in l1.chosen]
    for k, m in zip(l2["kernels"], p.members):
        assert k["status"] == "done" and k["profiled"]["matches_chosen"], k["profiled"]
        assert k["profiled"]["position"] == m.position == k["profiled"]["index"]
        assert (k["profiled"]["grid"], k["profiled"]["block"]) == (k["plan"]["grid"], k["plan"]["block"])
        (read,) = k["report"]["analyses"]["kernels"]               # the kernel doctor read that launch alone
        assert read["grid"][0] == m.grid and read["block"][0] == m.block and k["finding"] is not None
        # its own plan still reproduces it by hand: that launch alone under `perflab ncu`
        assert k["commands"]["record"].startswith(f"perflab ncu --kernel '^{k['function']}$' --launch-skip ")
    record = json.loads((tmp_path / "inv" / "investigation.json").read_text())
    r2 = record["levels"]["2"]
    assert r2["runs"] == "one" and len(r2["passes"]) == 1 and r2["passes"][0]["plan"]["regex"] == p.regex
    assert {k["report"] for k in r2["kernels"]} == {r2["passes"][0]["report"]}
    assert [k["position"] for k in r2["kernels"]] == [m.position for m in p.members]
    assert r2["expected_s"] > 0
    assert l2["other_reports"] == []                       # the window's report belongs to the kernels it holds
    # the folder read again gives the same report
    from perflab.doctor.investigation import build

    assert build(tmp_path / "inv").to_dict()["levels"][1]["kernels"] == l2["kernels"]


def test_a_launch_not_at_its_position_is_found_by_what_it_is_and_said(tmp_path, fake_ncu, recorded_level1, monkeypatch):
    """Set-up launches the trace does not hold move ncu's count: each kernel's launch is then read where it is, not
    where it should have been, and the entry says so."""
    from perflab.toolkit.investigate import Options, investigate

    (p,) = chosen_level1(2).passes
    launches = [("filler_kernel", 1, 32)] + [(m.kernel, m.grid, m.block) for m in p.members]   # one place later
    monkeypatch.setenv("FAKE_NCU_REPORT", str(window_report(tmp_path / "window.csv", launches)))
    d = investigate(["python", script(tmp_path)], tmp_path / "inv", Options(kernels=2)).to_dict()
    for k, m in zip(d["levels"][1]["kernels"], p.members):
        assert k["profiled"]["matches_chosen"] and k["profiled"]["index"] == m.position + 1
        assert "not this kernel's" in k["profiled"]["note"]


def test_the_old_way_stays_one_run_per_kernel_with_the_full_set(tmp_path, fake_ncu, recorded_level1):
    from perflab.toolkit.investigate import Options, investigate

    d = investigate(["python", script(tmp_path)], tmp_path / "inv",
                    Options(kernels=3, ncu_runs="per-kernel", section_set="full")).to_dict()
    calls = [c for c in fake_ncu() if "-o" in c]
    assert len(calls) == 3 and all(c[c.index("--set") + 1] == "full" for c in calls)
    assert [c[c.index("--kernel-name") + 1] for c in calls] == [f"regex:{k['plan']['regex']}"
                                                                for k in d["levels"][1]["kernels"]]


def test_unknown_ncu_runs_is_one_line(tmp_path, capsys):
    rc, _, err = cli_run(capsys, "investigate", "--ncu-runs", "some", "--out", str(tmp_path / "inv"), "--", "python",
                         script(tmp_path))
    assert rc == 2 and "--ncu-runs must be one of one, per-kernel" in err and err.count("\n") == 1


@pytest.mark.parametrize("position, note", [(1, False), (0, True)])
def test_one_h100_report_of_two_kernels_is_split_into_the_chosen_one(tmp_path, position, note):
    """The `kernel` recording's folder with its report replaced by one that holds two launches (the memory program's
    nvjet GEMM, then this program's fp32 GEMM): the kernel's entry reads the fp32 GEMM, as the report of that launch
    alone was read by hand (its printed ncu command)."""
    from perflab.doctor.investigation import build
    from perflab.doctor.ncu import diagnose_ncu

    folder = shutil.copytree(DATA / "kernel", tmp_path / "kernel")
    GEMM_CSV_COPY = folder / GEMM_CSV.name
    GEMM_CSV_COPY.unlink()
    merged_report(folder / "ncu-1-window.csv", NVJET_CSV, GEMM_CSV)
    record = json.loads((folder / "investigation.json").read_text())
    k = record["levels"]["2"]["kernels"][0]
    k.update(report="ncu-1-window.ncu-rep", position=position, **{"pass": 1})
    (folder / "investigation.json").write_text(json.dumps(record))
    entry = build(folder).to_dict()["levels"][1]["kernels"][0]
    hand = diagnose_ncu(DATA / "kernel.by-hand" / "ncu-1.csv").to_dict()
    assert entry["report_file"] == "ncu-1-window.csv"
    assert entry["profiled"]["launches"] == 2 and entry["profiled"]["index"] == 1 and entry["profiled"]["matches_chosen"]
    assert entry["profiled"]["duration_us"] == pytest.approx(hand["analyses"]["kernels"][0]["duration_us"], rel=0.05)
    assert entry["finding"]["id"] == hand["findings"][0]["id"] == "no-tensor-cores"
    assert [f["id"] for f in entry["findings"]] == [f["id"] for f in hand["findings"][:5]]
    assert ("note" in entry["profiled"]) == note


@pytest.fixture
def level1_with_history(monkeypatch, tmp_path):
    """Level 1 as test_investigate_run's recorded_level1, its process also leaving the allocator's history it was
    asked to keep (the recorded H100 snapshot stands for the pickle); what it was asked is kept."""
    from perflab.toolkit import memory_record, profile
    from test_investigate_run import SNAPSHOT, recorded_meta

    asked: dict = {}

    def fake_profile(cmd, *, out, run=None, memory_history=None, **kwargs):
        asked["memory_history"] = memory_history
        meta = recorded_meta(out)
        if memory_history:
            pickle = Path(memory_history["snapshot_dir"]) / "snapshot-1.pickle"
            shutil.copy(SNAPSHOT, pickle)
            meta["history"] = {"recording": True, "snapshot": str(pickle), "error": None,
                               "stacks_left_out_while_profiling": True}
        return profile.ProfiledRun(0, [out / "trace.json.gz"], [meta])

    def no_second_run(*a, **k):
        raise AssertionError("level 3 ran the program again")

    monkeypatch.setattr(profile, "profile_command", fake_profile)
    monkeypatch.setattr(memory_record, "record_command", no_second_run)
    return asked


def test_level_3_reads_the_history_level_1_recorded_without_a_run_of_its_own(tmp_path, level1_with_history):
    from perflab.doctor.memory import diagnose_memory
    from perflab.toolkit.investigate import Options, investigate
    from test_investigate_run import SNAPSHOT

    d = investigate(["python", script(tmp_path)], tmp_path / "inv", Options(kernels=0)).to_dict()
    asked = level1_with_history["memory_history"]
    assert asked["keep"] == "when-needed" and asked["max_entries"] == Options().max_entries
    l3 = d["levels"][2]
    assert l3["status"] == "done" and "peaked at" in l3["reasons"][0]
    assert l3["finding"]["id"] == diagnose_memory(SNAPSHOT).top.id == "memory-capacity"
    assert any("recorded in level 1's run" in n for n in l3["notes"])
    record = json.loads((tmp_path / "inv" / "investigation.json").read_text())
    assert record["levels"]["3"]["from_level1"] and record["levels"]["1"]["history"]["kept"]
    assert (tmp_path / "inv" / "memory.json.gz").exists()
    assert not Path(asked["snapshot_dir"]).exists()        # the pickle's folder is gone with the walk


def test_memory_never_records_no_history_in_level_1(tmp_path, level1_with_history):
    from perflab.toolkit.investigate import Options, investigate

    d = investigate(["python", script(tmp_path)], tmp_path / "inv", Options(kernels=0, memory="never")).to_dict()
    assert level1_with_history["memory_history"] is None and d["levels"][2]["status"] == "skipped"


def test_the_passes_ncu_replayed_are_read_from_its_output():
    from perflab.toolkit.investigate_kernels import replay_passes

    recorded = (DATA / "kernel" / "ncu-1-sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stag.log").read_text()
    assert replay_passes(recorded) == [38]
    newer = ('==PROF== Profiling "vectorAdd_A" - 0: 0%....50%....100% - 46 passes\n'
             '==PROF== Profiling "vectorAdd_B" - 1: 0%....50%....100% - 12 passes\n')
    assert replay_passes(newer) == [46, 12]


def test_the_expected_time_of_level_2_counts_program_runs_and_replays():
    from perflab.toolkit.investigate_kernels import PASSES, expected_level2_s, expected_ncu_s

    l1 = chosen_level1(3)
    one = expected_level2_s(l1, 30.0, "one", "doctor")
    per_kernel = expected_level2_s(l1, 30.0, "per-kernel", "full")
    assert one == pytest.approx(expected_ncu_s(30.0, l1.passes[0].count, max(
        t.time_us / t.launches_per_step for t in l1.chosen), "doctor"))
    assert per_kernel > 3 * 30.0 > one > 30.0 and PASSES["full"] > PASSES["doctor"]
