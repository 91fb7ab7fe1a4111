"""Not judged is not healthy (issue 24, item 4): a busy trace whose GPU time the work model cannot price heads
with what it could not judge, the share, the kernels and the `perflab ncu` command; `perflab investigate` sends
those kernels to Nsight Compute by their time. Before, 12 of the catalog's slow traces had `healthy` on top
(8 of them with "not judged" in the text), among them kernels 7-17x slower than their fix."""
from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from perflab.doctor import diagnose
from perflab.doctor.investigation_system import read_level1

ROOT = Path(__file__).resolve().parents[2]
CATALOG = ROOT / "src" / "perflab" / "catalog"
HEALTHY = ROOT / "tests" / "data" / "kineto" / "h100_healthy_gemm.trace.json.gz"
# slow traces of kernel puzzles whose custom CUDA kernels no op model prices (1.8-17x slower than their fix:
# artifacts/measurements.json, slow against solution medians)
UNPRICED = ["50-uncoalesced-transpose", "51-bank-conflicts", "53-warp-divergence", "54-register-spill",
            "58-tail-effect", "60-l2-locality"]


@pytest.mark.parametrize("puzzle", UNPRICED)
def test_a_busy_trace_of_unpriced_kernels_is_not_healthy_and_names_them(puzzle):
    trace = CATALOG / puzzle / "artifacts" / "slow.trace.json.gz"
    report = diagnose(trace)
    assert "healthy" not in report.ids()
    top = report.findings[0]
    assert top.id == "not-judged" and top.gain_pct == 0 and report.verdict.startswith("Not judged:")
    ev = top.evidence
    assert ev["unjudged_gpu_time_pct"] >= 50 and ev["gpu_busy_pct"] > 80
    assert ev["kernels"][0]["gpu_time_pct"] == max(k["gpu_time_pct"] for k in ev["kernels"])
    assert ev["ncu_command"].startswith("perflab ncu --kernel") and ev["ncu_command"] in report.verdict
    # investigate's level 1 picks the same kernel, by its time, with the same ncu launch
    l1 = read_level1([trace])
    first = l1.chosen[0]
    assert first.kernel == ev["kernels"][0]["kernel"] and first.sol_us is None
    assert shlex.join(l1.plans[first.row].ncu_options()) in ev["ncu_command"]


def test_a_trace_judged_near_its_roof_stays_healthy():
    report = diagnose(HEALTHY)
    assert report.findings[0].id == "healthy" and "not judged" not in report.verdict.lower()
