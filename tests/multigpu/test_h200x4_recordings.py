"""The 4 x H200 recordings of 2026-11-27 (docs/multigpu/2026-11-27-h200x4-collectives-scaling/): the collective
sweep follows nccl-tests' formulas from its own recorded times, comm-below-roof takes it as the measured roof, and
the interconnect lesson's answers come out of interconnect.json."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from perflab.analysis.multigpu import comm_roof as R
from perflab.analysis.multigpu import interconnect as I
from perflab.analysis.work.saved_ceilings import sweeps_of

H = Path(__file__).resolve().parents[2] / "docs" / "multigpu" / "2026-11-27-h200x4-collectives-scaling"
# nccl-tests (PERFORMANCE.md): busbw = algbw x this, n ranks
BUS_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
              "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n}


def _doc(name):
    return json.loads((H / name).read_text())


def test_busbw_follows_nccl_tests_formulas_from_the_recorded_times():
    doc = _doc("collectives_4gpu.json")
    assert doc["manifest"]["gpu"] == "NVIDIA H200" and doc["world_size"] == 4
    assert set(doc["sweeps"]) == set(BUS_FACTOR)
    for kind, sweep in doc["sweeps"].items():
        n = sweep["world_size"]
        for r in sweep["rows"]:
            algbw = r["bytes"] / (r["time_us"] * 1e-6) / 1e9
            assert r["algbw_gbps"] == pytest.approx(algbw, rel=1e-6), (kind, r)
            assert r["busbw_gbps"] == pytest.approx(algbw * BUS_FACTOR[kind](n), rel=1e-6), (kind, r)


def test_comm_below_roof_takes_the_recorded_sweep_as_its_measured_roof():
    doc = _doc("collectives_4gpu.json")
    sweeps = sweeps_of(doc, str(H / "collectives_4gpu.json"))
    roof = R.comm_roof("NVIDIA H200", 4, sweeps, None)
    assert set(roof.curves) == set(BUS_FACTOR)
    assert "measured all_reduce sweep on 4 x NVIDIA H200" in roof.source
    big = doc["sweeps"]["all_reduce"]["rows"][-1]
    bw, label = roof.busbw_at("all_reduce", big["bytes"], BUS_FACTOR["all_reduce"](4))
    assert bw == pytest.approx(big["busbw_gbps"], rel=1e-6) and "collectives_4gpu.json" in label
    a2a = doc["sweeps"]["all_to_all"]["rows"][-1]
    assert roof.busbw_at("all_to_all", a2a["bytes"], 0.75)[0] == pytest.approx(a2a["busbw_gbps"], rel=1e-6)


def test_interconnect_lesson_answers_from_the_recorded_sweep():
    doc = _doc("interconnect.json")
    assert I.transport(doc, "default") == ["via P2P/CUMEM"]          # NVLink peer-to-peer
    assert I.transport(doc, "p2p_off")[0].startswith("via SHM")      # through host memory
    big, small = 268435456, 4096
    nvlink, host = I.point(doc, "default", big), I.point(doc, "p2p_off", big)
    assert nvlink > 5 * host                                         # the host path costs most of the link
    # small messages are latency: every path takes tens of µs, whatever its bandwidth
    times = [I.point(doc, s, small, "time_us") for s in I.SETTINGS]
    assert max(times) < 2 * min(times) and min(times) > 10
    # ring and tree: within a few % of each other at 256 MiB on 2 ranks
    assert I.point(doc, "tree", big) == pytest.approx(I.point(doc, "ring", big), rel=0.1)
