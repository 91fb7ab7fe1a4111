"""Each finding's stated range holds its point: floor (the symptom's share removed) <= point (what the fix changes)
<= ceiling, on every catalog puzzle's recorded slow trace; and the points the fixes' evidence prices (a loop of
small launches packed by a persistent kernel, a recompiling step's steady-state code, a fused chain's floor) hold
the speed-ups the catalog measured (its recorded measurements.json)."""
from __future__ import annotations

import pytest

from perflab.analysis.work.estimate import speedup_bounds, speedup_of_gain, speedup_point
from perflab.doctor import diagnose
from perflab.puzzles.engine import replay
from perflab.puzzles.engine.catalog import load_catalog
from perflab.trace.builders.synthetic import TraceBuilder, launch_bound

ROUNDING = 1.01   # gains are stated to 0.1 %, bounds to 0.01x: a point read from a rounded gain may sit this close


def _recorded(pid: str):
    p = next((p for p in load_catalog() if p.id == pid), None)
    if p is None or not replay.is_recorded(p):
        pytest.skip(f"{pid} is not recorded here")
    return replay.recording(p)


def _finding(report, fid: str):
    return next(f for f in report.findings if f.id == fid)


def _measured(ev) -> tuple[float, float]:
    sp = ev.measurements()["speedup"]
    return float(sp.get("ci_low", sp["point"])), float(sp.get("ci_high", sp["point"]))


def _trace_puzzles() -> list[str]:
    return [p.id for p in load_catalog() if replay.is_recorded(p) and p.check and p.check.planted_in == "trace"]


@pytest.mark.parametrize("pid", _trace_puzzles())
def test_every_finding_on_a_slow_trace_states_its_point_inside_its_range(pid):
    ev = _recorded(pid)
    for f in ev.report("slow").findings:
        lo, hi = speedup_bounds(f)
        point = speedup_point(f)
        # a gain shared with a finding ranked above it (doctor/shared_time.py) is what is left after that fix; the
        # range describes this finding's own fix, the gain it had before sharing
        own = f.evidence.get("gain_before_sharing_pct", f.gain_pct)
        point = point if point is not None else speedup_of_gain(own)
        assert lo is None or lo <= point * ROUNDING, (f.id, lo, point)
        assert hi is None or point <= hi * ROUNDING, (f.id, point, hi)


def _one_kernel_per_item(items: int = 300, kernel_us: float = 6.0) -> TraceBuilder:
    b = TraceBuilder()
    for n in range(4):
        with b.step(n):
            for _ in range(items):
                b.op("triton_softmax", [("triton_per_fused_softmax_0", kernel_us, [1, 1, 1], [128, 1, 1])],
                     cpu_us=12.0)
                b.python(4.0)
    b.synchronize()
    return b


def test_one_small_kernel_per_work_item_is_priced_packed_onto_every_sm(tmp_path):
    report = diagnose(_one_kernel_per_item().write(tmp_path / "t.json"))
    f = _finding(report, "launch-overhead")
    e = f.evidence
    # 300 one-block launches of 6 µs per step on 132 SMs: a persistent kernel runs them in 300 * 6 / 132 µs
    assert e["per_item_blocks_p50"] == 1 and e["sm_count"] == 132
    assert e["step_us_packed"] == pytest.approx(300 * 6.0 / 132, rel=0.02)
    assert e["speedup_est"] > 10 * e["speedup_at_least"]


def test_a_varied_sequence_of_small_ops_is_not_priced_as_one_persistent_kernel(tmp_path):
    f = _finding(diagnose(launch_bound().write(tmp_path / "t.json")), "launch-overhead")
    assert "speedup_est" not in f.evidence and "per_item_kernel" not in f.evidence


def test_the_persistent_kernel_puzzle_point_is_within_one_and_a_half_of_its_measured_fix():
    ev = _recorded("persistent-kernel")
    f = _finding(ev.report("slow"), "launch-overhead")
    low, high = _measured(ev)
    assert low / 1.5 <= f.evidence["speedup_est"] <= high * 1.5, (f.evidence["speedup_est"], low, high)


def test_a_recompiling_step_states_the_ceiling_its_steady_state_code_sets_and_it_holds_the_measured_fix():
    ev = _recorded("recompilation")
    e = _finding(ev.report("slow"), "recompilation").evidence
    low, high = _measured(ev)
    assert e["speedup_at_least"] <= high and low <= e["speedup_at_most"], (e, low, high)
    assert e["step_ms_at_best"] < e["compile_ms_per_step"] / 100


def test_a_fused_chain_floor_holds_the_measured_fix_where_streams_and_syncs_share_the_step():
    ev = _recorded("nvtx-streams")
    e = _finding(ev.report("slow"), "unfused-elementwise").evidence
    low, high = _measured(ev)
    assert e["speedup_at_least"] <= high, (e["speedup_at_least"], low, high)


def test_host_work_after_a_drain_is_priced_with_the_drain_it_leaves_idle():
    # custom-trace-rules: a .tolist() drains the GPU, then a Python audit runs while it idles; the gap is split
    # between host-sync and host-compute, and removing the audit closes all of it
    ev = _recorded("custom-trace-rules")
    report = ev.report("slow")
    f = _finding(report, "host-compute")
    e = f.evidence
    low, high = _measured(ev)
    assert e["speedup_est"] > speedup_of_gain(f.gain_pct) * 1.2
    assert low / 1.5 <= e["speedup_est"] <= min(high * 1.5, e["speedup_at_most"])
