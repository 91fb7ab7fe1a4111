"""Issue 27: the doctor's gains against the speed-ups their fixes measured on the H100 (the recorded catalog),
what a finding states when a gain cannot be a point, and findings that share lost time."""
from __future__ import annotations

import pytest

from perflab.analysis.work.estimate import capped_gains, gain_of_speedup, speedup_bounds, speedup_of_gain, step_speedup
from perflab.doctor.finding import Finding
from perflab.doctor.shared_time import COPY_VIEWS, IDLE_CAUSES, pooled_sums, share_lost_time
from perflab.puzzles.calibration import FAR, Row, Summary, calibrate_catalog, table
from perflab.puzzles.engine import replay
from perflab.puzzles.engine.catalog import load_catalog

GOAL_SHARE = 0.8
WITHIN = 1.5


@pytest.fixture(scope="module")
def summary() -> Summary:
    return calibrate_catalog(load_catalog())


def test_enough_puzzles_are_calibrated(summary):
    assert len(summary.judged) >= 40, [r.skipped for r in summary.rows]


def test_goal_eighty_percent_within_one_and_a_half_or_inside_their_stated_bound(summary):
    ok = summary.count_within(WITHIN)
    assert ok >= GOAL_SHARE * len(summary.judged), table(summary)


def test_none_off_by_more_than_three_unless_the_measurement_lies_within_the_stated_bound(summary):
    far = [(r.puzzle, r.finding, r.predicted, r.measured) for r in summary.judged
           if r.point_off_by > FAR and not r.within_bound()]
    assert not far, far


def test_issue_35_targets_eighty_percent_of_points_within_one_and_a_half_and_no_point_off_by_three(summary):
    points = summary.count_within(WITHIN, True)
    assert points >= GOAL_SHARE * len(summary.judged), table(summary)
    far = [(r.puzzle, r.finding, r.predicted, r.measured) for r in summary.judged if r.point_off_by > FAR]
    assert not far, far
    assert not summary.broken_bounds(), [r.puzzle for r in summary.broken_bounds()]


def test_loops_over_items_are_priced_batched_and_a_staged_fix_by_its_own_stage(summary):
    """speed-of-light and batch-size-knee run the same ops on each piece of one tensor: the fix batches them (their
    weights read once), measured 12-100x where removing the launch gaps alone says 3-6x. The walk's solution fixes
    three findings; its planted one is calibrated against stage1, which fixes the launches alone."""
    rows = {r.puzzle: r for r in summary.judged}
    for pid in ("speed-of-light", "batch-size-knee", "walk"):
        if pid not in rows:
            pytest.skip(f"{pid} is not recorded here")
        r = rows[pid]
        assert r.finding == "launch-overhead" and r.within_bound() and r.point_off_by < FAR, (pid, r.predicted)
        assert r.predicted > 2 * r.at_least, (pid, r.predicted, r.at_least)   # the gap alone is the floor
    assert "slow / stage1" in rows["walk"].measured_how


def test_every_point_that_misses_by_more_than_one_and_a_half_states_a_bound_the_measurement_keeps(summary):
    missed = [r for r in summary.judged if r.point_off_by > WITHIN and r.has_bound()]
    assert missed, "the catalog has findings whose gain cannot be a point (atomic storms, launch-bound steps)"
    assert all(r.within_bound() for r in missed), [(r.puzzle, r.at_least, r.at_most, r.measured) for r in missed]


def test_the_atomic_storms_are_priced_by_the_work_left_at_its_speed_of_light(summary):
    """Contended atomics measured 166-1,100x: the symptom's share (the floor) says ~5x, the kernel's DRAM bytes and
    math at the practical pace (the point) say what the fix gives."""
    rows = {r.puzzle: r for r in summary.judged}
    for pid in ("atomic-contention", "inter-sm-sync", "optimization-loop"):
        r = rows[pid]
        assert r.level == "ncu" and r.within_bound() and r.point_off_by < WITHIN, (pid, r.predicted, r.measured)
        assert r.measured > 10 * r.at_least   # "% of kernel time" could never have said this


def test_every_kernel_finding_states_a_range_that_holds_and_a_point_within_one_and_a_half(summary):
    """The kernel rows (Nsight Compute) are priced by one model of the kernel's time: each states a range, and the
    measurement lies in it; its point is within 1.5x. A step that sped up beyond what the one kernel could give
    (Amdahl) is judged on the kernel's own measured speed-up, and says so."""
    kernel_rows = [r for r in summary.judged if r.level.startswith("ncu")]
    assert len(kernel_rows) >= 19
    for r in kernel_rows:
        assert r.has_bound() and r.within_bound(), (r.puzzle, r.at_least, r.at_most, r.measured, r.measured_ci)
        assert r.point_off_by < WITHIN, (r.puzzle, r.finding, r.predicted, r.measured)
        if r.level == "ncu kernel":
            assert "beyond" in r.measured_how and "this kernel alone" in r.measured_how


def test_no_tensor_cores_is_priced_at_the_bf16_roof_its_fix_names_with_tf32_as_the_floor(summary):
    rows = {r.puzzle: r for r in summary.judged}
    for pid in ("energy-precision", "operator-hotspot", "honest-timers"):
        r = rows[pid]
        assert r.finding == "no-tensor-cores" and r.at_least is not None and r.predicted > r.at_least
        assert r.measured >= r.at_least     # TF32 (honest-timers) or bf16: never below the TF32 floor


def test_a_memory_fix_is_calibrated_against_reserved_memory(summary):
    rows = {r.puzzle: r for r in summary.judged}
    assert rows["memory-timeline"].level == "memory" and rows["memory-timeline"].point_off_by < WITHIN


def test_serving_fixes_are_calibrated_from_the_engine_log_by_what_their_finding_prices(summary):
    rows = {r.puzzle: r for r in summary.judged}
    batching, chunking = rows["continuous-batching"], rows["chunked-prefill"]
    # padded-batch prices forwards (a decode forward costs about the same whatever rows it serves): step time
    assert batching.level == "serving" and batching.finding == "padded-batch" and batching.point_off_by < WITHIN
    # prefill-stall prices the ITL p99 a token budget leaves: the fix's measured ITL p99 ratio
    assert chunking.level == "serving" and chunking.finding == "prefill-stall" and chunking.point_off_by < WITHIN


def test_speedup_arithmetic():
    assert speedup_of_gain(50) == pytest.approx(2.0)
    assert gain_of_speedup(4.0) == pytest.approx(75.0)
    assert step_speedup(100.0, 0.5) == pytest.approx(1 / (0.5 + 0.005))
    f = Finding(id="atomic-contention", severity="high", gain_pct=40.0, evidence={"kernel_speedup_at_least": 5.0},
                fix="")
    lo, hi = speedup_bounds(f, share=0.5)
    assert lo == pytest.approx(1 / (0.5 + 0.1)) and hi is None


def test_a_row_outside_its_bound_is_judged_by_its_point():
    r = Row(puzzle="p", planted="x", level="trace", finding="x", predicted=2.0, at_least=2.0, measured=1.0)
    assert r.bound_broken() and r.off_by == pytest.approx(2.0)
    r.measured = 9.0
    assert r.within_bound() and r.off_by == 1.0 and r.point_off_by == pytest.approx(4.5)
    # a measurement is an interval: a bound it overlaps holds it
    r = Row(puzzle="p", planted="x", level="ncu", finding="x", predicted=5.0, at_least=4.0, at_most=6.74,
            measured=6.743, measured_ci=(6.67, 6.77))
    assert r.within_bound()
    r.measured_ci = (6.75, 6.77)
    assert r.bound_broken()


def test_capped_gains_never_exceed_the_time_there_is():
    assert sum(capped_gains([60.0, 50.0], 80.0)) == pytest.approx(80.0)
    assert capped_gains([10.0, 5.0], 80.0) == [10.0, 5.0]


def _f(fid: str, gain: float) -> Finding:
    return Finding(id=fid, severity="high", gain_pct=gain, evidence={}, fix="")


def test_two_views_of_the_same_copies_share_them():
    found = share_lost_time([_f("pageable-memcpy", 86.1), _f("h2d-copy", 86.1), _f("no-overlap", 8.3)])
    assert [f.gain_pct for f in found] == [86.1, 0.0, 0.0]
    assert found[1].evidence["shares_time_with"] == "pageable-memcpy"


def test_idle_causes_never_add_up_to_more_than_the_idle_time():
    found = share_lost_time([_f("host-sync", 50.0), _f("launch-overhead", 30.0), _f("host-compute", 20.0)], 60.0)
    assert sum(f.gain_pct for f in found) == pytest.approx(60.0)
    assert found[0].gain_pct == 50.0


@pytest.mark.parametrize("pid", ["pageable-copies", "d2h-copy", "copy-compute-overlap", "custom-trace-rules"])
def test_recorded_traces_hold_their_pools_within_the_time_there_is(pid):
    p = {p.id: p for p in load_catalog()}[pid]
    r = replay.recording(p).report("slow")
    idle = 100.0 - r.analyses["summary"]["gpu_busy_pct"]
    sums = pooled_sums(r.findings)
    copy_claims = [f.evidence.get("gain_before_sharing_pct", f.gain_pct) for f in r.findings if f.id in COPY_VIEWS]
    assert sums["copies"] <= max(copy_claims, default=0.0) + 0.1
    assert sums["idle"] <= idle + 0.5 or not any(f.id in IDLE_CAUSES for f in r.findings)
    assert sums["all"] <= 100.5
