"""The gain fixtures recorded on the H100/H200 (fixtures/kernels/GAINS and fixtures/memory/offload_two_streams.py,
recorded by scripts/record.py gain-fixtures into tests/data/ncu and tests/data/memory): the verdicts the doctor
got wrong, each checked on the recording. A line not recorded yet is skipped, named
(test_ncu_fixtures.test_fixtures_waiting_for_their_recording lists them all); the script itself is checked here
on the CPU side (its table, its plan)."""
from __future__ import annotations

import importlib.util
import math
import sys

import pytest

from test_ncu_fixtures import GAINS, ROOT, csv, table_rows
from perflab.doctor.ncu import diagnose_ncu

SNAPSHOT = ROOT / "tests" / "data" / "memory" / "offload_two_streams.memory.json.gz"
RECORD = "run `python3 scripts/record.py gain-fixtures OUT` on the GPU machine and copy OUT's files in"
EXPECTED = dict(table_rows(GAINS))


def recorded(name: str):
    if not csv(name).exists():
        pytest.skip(f"{name} is not recorded yet: {RECORD}")
    return diagnose_ncu(csv(name))


def ids(report) -> list[str]:
    return [f.id for f in report.findings]


def first(report, *fids):
    return next((f for f in report.findings if f.id in fids), None)


def assert_tail_is_at_most_its_idle_part(report, top) -> None:
    tail = first(report, "tail-effect")
    if tail is not None:
        assert tail.evidence["kernel_gain_pct"] <= tail.evidence["idle_sm_time_pct"] + 0.1
        assert ids(report).index("tail-effect") > ids(report).index(top.id)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_gain_fixture_leads_with_what_a_person_would_name(name):
    report = recorded(name)
    top = report.findings[0]
    assert top.id == EXPECTED[name], [(f.id, f.severity, f.gain_pct, f.summary) for f in report.findings]
    if top.id != "healthy":   # a fix is priced as a range and a point inside it
        lo, hi = top.evidence["kernel_speedup_range"]
        assert 1.0 <= lo <= top.evidence["kernel_speedup_est"] <= hi


def test_the_triton_fp32_matmul_is_no_tensor_cores_with_the_tensor_roof_as_its_speed_of_light():
    report = recorded("gain_triton_fp32_matmul")
    top = report.findings[0]
    assert top.id == "no-tensor-cores" and top.evidence["simt_pipe"] == "FMA pipe"
    assert top.evidence["limit_after_fix"] == "tensor pipe" and 3 <= top.evidence["kernel_speedup_est"] <= 15
    assert_tail_is_at_most_its_idle_part(report, top)


def test_the_tiled_gemm_reads_its_inputs_about_once_and_the_untiled_one_re_reads_them():
    tiled, untiled = recorded("gain_gemm_tiled"), recorded("gain_gemm_untiled")
    assert not {"l2-miss", "poor-locality"} & set(ids(tiled)), [(f.id, f.gain_pct) for f in tiled.findings]
    reuse = first(untiled, "l2-miss", "poor-locality")
    assert reuse is not None, [(f.id, f.gain_pct) for f in untiled.findings]
    ev = reuse.evidence
    assert ev["dram_bytes"] >= 20 * ev["compulsory_bytes_est"]         # B re-read for every row of its tile
    assert reuse.evidence["kernel_speedup_est"] > 2.0
    coalesce = first(untiled, "uncoalesced-access")
    if coalesce is not None:   # half of each sector unused: at most 2x, and ranked under what tiling saves
        assert coalesce.evidence["kernel_speedup_at_most"] <= 2.05
        assert ids(untiled).index(reuse.id) < ids(untiled).index("uncoalesced-access")


def test_a_small_last_wave_costs_at_most_its_idle_part():
    # recorded on the H200: 4.05 waves, and the SMs stay 97 % busy (the last wave's few blocks, alone on their SMs,
    # run faster): healthy at its roof; the last wave can have cost no more than the SMs' 3 % idle, no finding
    report = recorded("gain_small_last_wave")
    top = report.findings[0]
    assert top.id == "healthy" and all(f.severity == "info" for f in report.findings)
    assert report.analyses["kernels"][0]["limits"]["launch"]["waves_per_sm"] > 4


def test_a_gemv_far_below_its_dram_roof_is_memory_bound_before_its_partial_wave():
    report = recorded("gain_gemv_partial_wave")
    top = report.findings[0]
    assert top.id == "memory-bound" and top.evidence["limit_after_fix"] == "DRAM"
    assert top.evidence.get("dram_throughput_pct", 100) < 60
    assert not {"no-tensor-cores", "l2-miss", "poor-locality"} & set(ids(report))
    assert_tail_is_at_most_its_idle_part(report, top)


def test_the_offload_loops_snapshot_is_allocator_churn_on_two_streams():
    if not SNAPSHOT.exists():
        pytest.skip(f"{SNAPSHOT.name} is not recorded yet: {RECORD}")
    from perflab.doctor.memory import diagnose_memory

    report = diagnose_memory(SNAPSHOT)
    top = report.findings[0]
    ev = top.evidence
    assert top.id == "allocator-churn", [(f.id, f.summary) for f in report.findings]
    assert ev["cycled_segments"] >= 16 and ev["streams"] >= 2
    assert any("load_layer" in s or "offload_two_streams" in s for s in ev["sites"]), ev["sites"]


def _script():
    spec = importlib.util.spec_from_file_location("gain_fixtures", ROOT / "scripts" / "recorders" / "gain_fixtures.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod      # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def test_the_recording_script_plans_every_table_line_and_the_snapshot(capsys, tmp_path):
    script = _script()
    rows = script.read_table()
    assert [r.name for r in rows] == [n for n, _ in table_rows(GAINS)]
    builds = {cmd[-1] for cmd in script.build_commands(rows)}
    assert builds == {"fixtures/kernels/gemm_tiling.cu", "fixtures/kernels/small_last_wave.cu",
                      "fixtures/kernels/gemv_partial_wave.cu"}
    assert script.main([str(tmp_path / "rec"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert all(f"ncu {n}:" in out for n in EXPECTED) and "offload_two_streams.memory.json.gz" in out
    assert not (tmp_path / "rec").exists()   # a dry run writes nothing


def test_the_recording_script_refuses_bad_input_with_one_line(capsys, tmp_path):
    script = _script()
    assert script.main([str(tmp_path), "--only", "no_such_fixture", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not in GAINS: no_such_fixture" in err
    (tmp_path / "gains.manifest.json").write_text("{}")
    assert script.main([str(tmp_path)]) == 2          # an earlier run's files stay unless --force
    assert "--force" in capsys.readouterr().err and (tmp_path / "gains.manifest.json").read_text() == "{}"
    blocked = tmp_path / "a_file"
    blocked.write_text("x")
    assert script.main([str(blocked)]) == 2 and blocked.read_text() == "x"
