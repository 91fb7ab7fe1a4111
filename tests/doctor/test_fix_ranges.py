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


def _looped(tmp_path, *, items: int, carve: str = "select", as_weight: bool = False):
    """A step that runs a projection and a GELU on each of `items` pieces of one bf16 tensor [items, 32, 1024]: a
    view call per piece, then the ops on the piece (`as_weight`: the pieces are a stacked weight [items, 1024, 1024]
    multiplied into one activation, a layer loop)."""
    b = TraceBuilder()
    parent = [items, 1024, 1024] if as_weight else [items, 32, 1024]
    for n in range(3):
        with b.step(n):
            for i in range(items):
                if carve == "select":
                    with b.span("aten::select", **{"Input Dims": [parent, [], []], "Concrete Inputs": ["", "0", str(i)]}):
                        b.python(2.0)
                else:   # a split into `items` chunks along the last dimension
                    with b.span("aten::slice", **{"Input Dims": [parent, [], [], [], []],
                                                  "Concrete Inputs": ["", "-1", str(i * 1024 // items),
                                                                      str((i + 1) * 1024 // items), "1"]}):
                        b.python(2.0)
                x, w = ([32, 1024], [1024, 1024])
                b.op("aten::addmm", [("nvjet_sm90_tst_64x32_64x16_2x1_v_bz_bias_TNT", 6.0, [16, 1, 1], [128, 1, 1])],
                     cpu_us=20.0, dims=[[1024], x, w, [], []], dtypes=["c10::BFloat16"] * 3 + ["Scalar", "Scalar"])
                b.op("aten::gelu", [("void at::native::vectorized_elementwise_kernel<4, gelu>", 2.0)], cpu_us=10.0,
                     dims=[[32, 1024], []], dtypes=["c10::BFloat16", ""])
    b.synchronize()
    return diagnose(b.write(tmp_path / "t.json"))


def test_a_loop_over_the_pieces_of_one_tensor_is_priced_batched(tmp_path):
    e = _finding(_looped(tmp_path, items=64), "launch-overhead").evidence
    assert e["items_per_step"] == 64 and e["item_view"] == "aten::select" and e["item_shape"] == [32, 1024]
    assert set(e["looped_ops"]) == {"aten::addmm", "aten::gelu"}
    # batched: 64 x 2 x 32 x 1024 x 1024 FLOPs and the weight read once, at the H100's roofs, far under the loop's
    # 64 x 8 µs of kernels
    assert e["looped_us_at_roof_batched"] < e["looped_us_per_step"] / 10
    assert e["speedup_at_least"] < e["speedup_est"] <= e["speedup_at_most"]


def test_a_layer_loop_over_a_stacked_weight_and_a_three_way_split_are_not_item_loops(tmp_path):
    layers = _finding(_looped(tmp_path, items=24, as_weight=True), "launch-overhead").evidence
    assert "items_per_step" not in layers
    split = _finding(_looped(tmp_path, items=3, carve="slice"), "launch-overhead").evidence
    assert "items_per_step" not in split


# findings whose range follows from what their evidence means: a wait or host cost removed, copies or collectives
# overlapped with compute, ops at the GPU's peak, a padded batch filled, a prefill chunked, memory the live tensors
# need; each range holds the speed-up (or the reserved-memory / ITL p99 ratio) the catalog measured
RANGED = {"host-sync": "host-sync", "before-after": "host-sync", "pageable-copies": "pageable-memcpy",
          "copy-compute-overlap": "no-overlap", "input-pipeline": "input-pipeline",
          "allocator-churn": "allocator-churn", "fp8-weight-only": "dequant-overhead", "below-roof": "below-roof",
          "exposed-allreduce": "comm-not-overlapped", "nccl-timeline": "comm-not-overlapped",
          "tp-scaling-knee": "comm-not-overlapped", "continuous-batching": "padded-batch",
          "chunked-prefill": "prefill-stall", "serving-trace": "prefill-stall", "memory-timeline": "memory-capacity",
          "cuda-graph-memory": "memory-capacity"}


@pytest.mark.parametrize("pid", sorted(RANGED))
def test_the_range_a_finding_states_holds_its_point_and_the_measured_fix(pid):
    from perflab.puzzles.calibration import calibrate

    p = next((p for p in load_catalog() if p.id == pid), None)
    if p is None or not replay.is_recorded(p):
        pytest.skip(f"{pid} is not recorded here")
    row = calibrate(p)
    assert row.finding == RANGED[pid] and row.has_bound(), (row.finding, row.at_least, row.at_most)
    assert row.within_bound(), (row.at_least, row.at_most, row.measured, row.measured_ci)
    assert row.at_least is None or row.at_least <= row.predicted * ROUNDING, (row.at_least, row.predicted)
    assert row.at_most is None or row.predicted <= row.at_most * ROUNDING, (row.predicted, row.at_most)
