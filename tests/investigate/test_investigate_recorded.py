"""The offline path on what `perflab investigate` recorded on an H100 (tests/data/investigate, manifest.json: three
programs that need different levels), checked against the levels run by hand with the commands its report printed.

  host-bound  examples/tiny_gpt_inference.py: level 1 leads (host-compute), no kernel worth ncu, memory not needed
  kernel      puzzle 14's slow workload: level 1's no-tensor-cores, the fp32 head GEMM profiled at the chosen launch
  memory      examples/keep_outputs.py: reserved memory near capacity, level 3 leads (temporaries held together)
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import cli_run

DATA = Path(__file__).resolve().parents[1] / "data" / "investigate"
NAMES = ("host-bound", "kernel", "memory")


def live(name: str) -> dict:
    return json.loads((DATA / f"{name}.report.json").read_text())


def by_hand(name: str, what: str) -> dict:
    return json.loads((DATA / f"{name}.by-hand" / f"doctor-{what}.json").read_text())


@pytest.fixture(scope="module")
def offline():
    from perflab.doctor.investigation import build

    return {name: build(DATA / name).to_dict() for name in NAMES}


def test_the_manifest_says_where_and_when():
    m = json.loads((DATA / "manifest.json").read_text())
    assert m["gpu"].startswith("NVIDIA H100") and m["driver"] and m["torch"] and m["date"]
    assert {w["name"] for w in m["walls"]} == set(NAMES)


@pytest.mark.parametrize("name, level, scope", [("host-bound", 1, "system"), ("kernel", 1, "kernel"),
                                                ("memory", 3, "memory")])
def test_each_program_gets_the_level_it_needs(offline, name, level, scope):
    h = offline[name]["headline"]
    assert (h["level"], h["scope"]) == (level, scope), h
    assert (live(name)["headline"]["level"], live(name)["headline"]["scope"]) == (level, scope)


@pytest.mark.parametrize("name", NAMES)
def test_the_offline_report_reads_the_recording_as_the_run_did(offline, name):
    rec, now = live(name), offline[name]
    for a, b in zip(rec["levels"], now["levels"]):
        assert a["status"] == b["status"], (a["level"], a["status"], b["status"])
        for key, value in (a.get("evidence") or {}).items():   # what the run said still stands (more may be said)
            # (a step read on the GPU's clock, where the host runs ahead, may differ from the run's by a µs or two)
            assert b["evidence"][key] == (pytest.approx(value, rel=1e-3) if isinstance(value, float) else value), \
                (a["level"], key)
    for a, b in zip(rec["levels"][1]["kernels"], now["levels"][1]["kernels"]):
        assert a["kernel"] == b["kernel"] and a["plan"] == b["plan"]
        assert a["profiled"] == b["profiled"]
    assert rec["levels"][2].get("reasons") == now["levels"][2].get("reasons")


def test_the_kernel_program_profiles_the_head_gemm_at_the_chosen_launch(offline):
    l2 = offline["kernel"]["levels"][1]
    assert [k["function"] for k in l2["kernels"]] == [
        "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma_aligna4_alignc4_execute_"
        "kernel__5x_cublas"]
    k = l2["kernels"][0]
    plan = k["plan"]
    # one head GEMM per step (regular: exact), 3 warm-up steps before the trace, the middle recorded step (#8)
    assert plan["exact"] and plan["per_step"] == 1 and plan["steps_before"] == 3 and plan["step"] == 8
    assert plan["skip"] == 3 * 1 + plan["index_in_steps"] == 8 and plan["count"] == 1
    assert k["profiled"]["matches_chosen"] and (k["profiled"]["grid"], k["profiled"]["block"]) == (1024, 256)
    assert k["profiled"]["duration_us"] == pytest.approx(k["chosen_launch"]["duration_us"], rel=0.03)
    assert k["finding"]["id"] == "no-tensor-cores" and offline["kernel"]["headline"]["function"] == k["function"]
    # the bf16 block GEMMs launch first in every step, and are not chosen: they run near their roof
    assert "nvjet" not in k["kernel"]


def test_the_host_bound_program_needs_no_kernel_profile(offline):
    d = offline["host-bound"]
    assert d["levels"][0]["finding"]["id"] == "host-compute" and d["levels"][0]["finding"]["gain_pct"] > 80
    assert d["levels"][1]["status"] == "not-needed" and "no kernel would save 3 %" in d["levels"][1]["top_line"]
    assert d["levels"][2]["status"] == "not-needed"


def test_the_memory_program_is_recorded_because_it_neared_capacity(offline):
    l3 = offline["memory"]["levels"][2]
    assert l3["status"] == "done" and "peaked at" in l3["reasons"][0]
    assert l3["finding"]["id"] == "memory-capacity" and l3["finding"]["severity"] == "high"
    assert "keep_outputs.py" in l3["top_line"]
    assert l3["evidence"]["held_at_peak"][0]["function"] == "keep_outputs.py:forward"
    assert l3["evidence"]["process_peak_reserved_mb"] >= 0.85 * l3["evidence"]["device_total_mb"]


@pytest.mark.parametrize("name", NAMES)
def test_level_1_agrees_with_perflab_profile_run_by_hand(offline, name):
    mine, hand = offline[name]["levels"][0], by_hand(name, "level1")
    assert mine["finding"]["id"] == hand["findings"][0]["id"]
    gain, hand_gain = mine["finding"]["gain_pct"], hand["findings"][0]["gain_pct"]
    if name == "kernel":
        # the by-hand doctor priced no-tensor-cores at the TF32 roof; it now prices the fix it recommends at the
        # bf16 roof (doctor/fix_bounds.py, half the TF32 speed of light): the gain lies between that older price
        # and the whole SIMT GEMM time, which both runs measured alike
        # The by-hand doctor read the SIMT share over the host's step ranges (74.5 %: the host runs ~31 ms ahead,
        # and those ranges held the tail of earlier steps' work); on the GPU's clock the same GEMMs (the same TFLOP
        # at the rate both runs measured) over the by-hand step's own 6.54 ms give the share read now
        ev, hand_ev = mine["finding"]["evidence"], hand["findings"][0]["evidence"]
        simt_ms = ev["simt_gemm_time_pct"] / 100 * mine["evidence"]["step_time_ms"] * ev["tflops_achieved"] \
            / hand_ev["tflops_achieved"]
        share = 100 * simt_ms / hand["analyses"]["summary"]["step_time_ms"]
        assert ev["simt_gemm_time_pct"] == pytest.approx(share, abs=2.0)
        assert hand_gain - 5.0 <= gain <= ev["simt_gemm_time_pct"]
    else:
        assert gain == pytest.approx(hand_gain, abs=5.0)
    # the host-bound step is host work that varies run to run (cuDNN builds a plan per shape); the others are GPU work
    tol = 0.35 if name == "host-bound" else 0.03
    assert mine["evidence"]["step_time_ms"] == pytest.approx(hand["analyses"]["summary"]["step_time_ms"], rel=tol)


@pytest.mark.parametrize("name", ["kernel", "memory"])
def test_level_2_agrees_with_the_printed_ncu_command_run_by_hand(offline, name):
    from perflab.analysis.ncu.ncu_plan import function_name
    from perflab.doctor.ncu import diagnose_ncu

    k = offline[name]["levels"][1]["kernels"][0]
    hand = diagnose_ncu(DATA / f"{name}.by-hand" / "ncu-1.csv").to_dict()
    rows = hand["analyses"]["kernels"]
    assert len(rows) == 1 and function_name(rows[0]["name"]) == k["function"]
    grid = rows[0]["grid"][0] * rows[0]["grid"][1] * rows[0]["grid"][2]
    assert (grid, rows[0]["block"][0]) == (k["plan"]["grid"], k["plan"]["block"])
    assert rows[0]["duration_us"] == pytest.approx(k["profiled"]["duration_us"], rel=0.05)
    assert hand["findings"][0]["id"] == k["finding"]["id"]
    assert k["commands"]["record"].startswith(f"perflab ncu --kernel '^{k['function']}$' --launch-skip "
                                              f"{k['plan']['skip']} --launch-count 1 --kill ")


def test_level_3_agrees_with_perflab_memory_record_run_by_hand(offline):
    from perflab.doctor.memory import diagnose_memory

    l3 = offline["memory"]["levels"][2]
    hand = diagnose_memory(DATA / "memory.by-hand" / "memory.json.gz")
    assert hand.top.id == l3["finding"]["id"] and hand.top.gain_pct == pytest.approx(l3["finding"]["gain_pct"], abs=1)
    peak = hand.analyses["memory"]["device"]["timeline"]["peak_reserved_mb"]
    assert peak == pytest.approx(l3["evidence"]["peak_reserved_mb"], rel=0.01)


def test_doctor_folder_prints_it_and_writes_the_page(tmp_path, capsys):
    folder = shutil.copytree(DATA / "kernel", tmp_path / "kernel")
    rc, out, _ = cli_run(capsys, "doctor", str(folder), "--html", str(tmp_path / "k.html"))
    assert rc == 0
    assert "act first on the kernel (level 1)" in out and "ncu profiled 1 launch(es); read #0: the chosen launch" in out
    assert "record by hand: perflab ncu --kernel" in out and "read by hand: perflab doctor" in out
    page = (tmp_path / "k.html").read_text()
    assert "no-tensor-cores" in page and "--launch-skip 8 --launch-count 1" in page
    rc, out, _ = cli_run(capsys, "doctor", str(folder), "--json")
    assert json.loads(out)["schema"] == "perflab.investigation/1"


WALK = Path(__file__).resolve().parents[2] / "src" / "perflab" / "catalog" / "65-walk" / "artifacts"


# stage1: level 1 and level 2 both name no-tensor-cores in the same SIMT GEMM; level 1 now prices the fix it
# recommends at the bf16 roof (doctor/fix_bounds.py), 64 % of the step against ncu's 63 %, so it leads.
# solution: the GELU -> addcmul chain left in solution.py moves 0.34 GB per step where one fused kernel moves
# 0.20 GB; priced at that fused pass it is ~12 % of the 0.54 ms step (was 7.8 %, 'low'): a real place to act.
@pytest.mark.parametrize("variant, level, scope, finding", [
    ("slow", 1, "system", None), ("stage1", 1, "kernel", "no-tensor-cores"), ("stage2", 1, "kernel", None),
    ("solution", 1, "kernel", "unfused-elementwise")])
def test_the_walk_headline_moves_and_stops_where_little_is_left(variant, level, scope, finding):
    """The walk puzzle's four H100 walks: the headline moves system -> kernel -> kernel -> kernel."""
    from perflab.doctor.investigation import build

    d = build(WALK / f"{variant}.investigation").to_dict()
    h = d["headline"]
    assert (h["level"], h["scope"]) == (level, scope), h
    assert h["gain_pct"] >= 10
    if finding:
        assert d["levels"][level - 1]["finding"]["id"] == finding
    if variant == "stage1":   # the same kernel at both levels
        assert h["function"] == d["levels"][1]["kernels"][0]["function"]


def test_the_headline_says_little_is_left_where_the_best_gain_is_low():
    """The walk solution's level 2 alone: the best it offers is a ~3 % bank-conflict gain in cuBLAS's GEMM, which
    is not a place to 'act first'."""
    from perflab.doctor.investigation import build, headline

    levels = build(WALK / "solution.investigation").to_dict()["levels"]
    levels[0] = {**levels[0], "finding": None}
    h = headline(levels)
    assert (h["level"], h["scope"]) == (2, "healthy"), h
    assert h["gain_pct"] < 5 and h["text"].startswith("Nothing big left") and "bank-conflict" in h["text"]
