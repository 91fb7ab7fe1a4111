"""A kernel held by the special-function unit (XU pipe, an eighth of the FMA pipe's rate) is compute-bound
on the XU pipe with a gain up to the next busiest resource, never `healthy` (issue 20, sfu-contention).

The recorded cases are puzzle 66-sfu-contention on the H100 (its artifacts; `precise` by the prototype): `slow` sums
K=128 Gaussians with one ex2.approx (MUFU.EX2) per term, `fast` the same sum with 3 exps per 16 terms
and products on the FMA pipe (1.9x faster), `precise` libm's expf (more FMA instructions, the same one
MUFU each). On the head before this rule all three were `healthy, at the SM roof`.
"""
from __future__ import annotations

import pytest

from test_ncu_fixtures import puzzle_report
from test_ncu_limiters import edited
from perflab.doctor.ncu import diagnose_profile

XU = "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_elapsed"
FMA = ("sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_elapsed",
       "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_elapsed")
SM = ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "sm__issue_active.avg.pct_of_peak_sustained_elapsed",
      "sm__inst_issued.avg.pct_of_peak_sustained_elapsed")


def sfu_kernel(xu: float, fma: float, issue: float):
    """fma_throughput edited into a kernel whose MUFU instructions keep the XU pipe at `xu` % (the SM
    throughput is the busiest pipe's), its FMA pipe at `fma` % and its issue slots at `issue` %."""
    return edited("fma_throughput", set_={XU: xu, **{m: fma for m in FMA}, SM[0]: max(xu, issue),
                                          **{m: issue for m in SM[1:]}})


def recorded(variant: str):
    return puzzle_report("66-sfu-contention", {"fast": "solution"}.get(variant, variant))


def test_a_kernel_at_the_xu_roof_is_compute_bound_on_the_xu_pipe_not_healthy():
    report = diagnose_profile(sfu_kernel(xu=95.0, fma=40.0, issue=55.0))
    top = report.findings[0]
    assert top.id == "compute-bound" and top.evidence["limiting_unit"] == "XU pipe", (top.id, top.summary)
    assert top.evidence["next_unit"] == "issue slots" and top.evidence["next_unit_pct"] == pytest.approx(55)
    assert top.gain_pct == pytest.approx(100 * (1 - 55 / 95), abs=0.2) and top.severity == "high"
    assert "healthy" not in [f.id for f in report.findings]
    assert "special-function" in top.summary and "95 %" in top.summary


def test_an_xu_pipe_as_busy_as_the_issue_slots_is_balanced_and_healthy():
    """Every issue slot taken as well: no wider pipe could take the XU's work without adding issue time."""
    report = diagnose_profile(sfu_kernel(xu=95.0, fma=60.0, issue=94.0))
    assert {f.id for f in report.findings} == {"compute-bound", "healthy"}
    assert all(f.severity == "info" and f.evidence["limiting_unit"] != "XU pipe" for f in report.findings)


def test_a_busy_xu_pipe_below_its_roof_is_not_called_its_limit():
    report = diagnose_profile(sfu_kernel(xu=70.0, fma=95.0, issue=96.0))
    assert all(f.evidence.get("limiting_unit") != "XU pipe" for f in report.findings)


def test_recorded_one_exp_per_term_kernel_is_xu_bound():
    report = recorded("slow")
    top = report.findings[0]
    assert top.id == "compute-bound" and top.evidence["limiting_unit"] == "XU pipe"
    assert top.evidence["limiting_unit_pct"] > 90 and top.severity in ("medium", "high")
    assert top.evidence["xu_share_of_instructions_pct"] == pytest.approx(17.8, abs=0.5)  # 128 MUFU of ~720 per element
    assert "healthy" not in [f.id for f in report.findings]


@pytest.mark.parametrize("variant", ["fast", "precise"])
def test_recorded_kernels_not_held_by_the_xu_pipe_keep_their_verdict(variant):
    """The recurrence (XU at 35 %) and libm's expf (XU at 55 %, issue slots at 94 %): at the issue roof."""
    report = recorded(variant)
    assert all(f.evidence.get("limiting_unit") != "XU pipe" for f in report.findings)
    assert all(f.severity in ("info", "low") for f in report.findings)
