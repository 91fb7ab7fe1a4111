"""CUDA-graph replays priced from the capture in the same trace (analysis/steps/graph_capture.py).

Most traces here are built with the event shapes of the recorded graphed decode (cudaGraphLaunch with cbid and
correlation, replayed kernels with its correlation and no External id) and of torch.profiler's launches
(cudaLaunchKernel / cuLaunchKernelEx with External id and correlation), to reach the cases a recording rarely
holds (several graphs, partial matches). Two recorded on the H100 by scripts/record.py graph-capture
(tests/data/stacks/manifest.capture.json) hold their capture in the window: a hand-captured decode graph and
torch.compile(mode="reduce-overhead")'s own capture.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from perflab.analysis.steps.graph_capture import HOW_TO_RECORD, captures, replayed_ops
from perflab.analysis.work.op_work import op_work
from perflab.analysis.steps.records import launch_records, record_notes
from perflab.analysis.steps.windows import analysis_windows
from perflab.doctor import diagnose
from perflab.trace import kineto
from perflab.trace.builders import synthetic_graphs as sg
from perflab.trace.builders.synthetic import ELEMENTWISE, GEMM, TraceBuilder

BF = "c10::BFloat16"
SILU = "triton_poi_fused_mul_silu_0"


def _ops(batch: int = 16) -> list[tuple]:
    return [("aten::mm", [[batch, 2048], [2048, 8192]], [BF, BF], [("kernel", GEMM, 20.0)]),
            (SILU, [[batch, 8192], [batch, 4096]], [BF, BF], [("triton", SILU, 3.0)]),
            ("aten::zero_", [[batch, 4096]], [BF], [("memset", "Memset (Device)", 1.0, batch * 4096 * 2)]),
            ("aten::add", [[batch, 2048], [batch, 2048]], [BF, BF], [("kernel", ELEMENTWISE, 2.0)])]


def _load(tmp_path, b: TraceBuilder, name: str):
    return kineto.load(b.write(tmp_path / f"{name}.json.gz"))


def _graphed(tmp_path, *, caps=(16,), replay_nodes=None, steps: int = 6, streams=None, name="graph"):
    b = TraceBuilder()
    nodes = [sg.capture(b, _ops(batch)) for batch in caps]
    b.synchronize()
    for n in range(steps):
        with b.step(n):
            sg.replay(b, replay_nodes or nodes[-1], streams=streams)
            b._wait_all("cudaStreamSynchronize", streams=[7])
    return _load(tmp_path, b, name)


def _eager(tmp_path, steps: int = 6):
    b = TraceBuilder()
    for n in range(steps):
        with b.step(n):
            sg.eager(b, _ops())
            b._wait_all("cudaStreamSynchronize", streams=[7])
    return _load(tmp_path, b, "eager")


def _work(trace):
    return op_work(trace, analysis_windows(trace))


def _by_name(work):
    return {g.name: (g.family, g.calls, g.kernels, g.flops, g.bytes) for g in work.groups}


def test_replayed_kernels_take_the_work_of_the_ops_that_captured_them(tmp_path):
    graph, eager = _work(_graphed(tmp_path)), _work(_eager(tmp_path))
    assert "graph_replay" not in graph.unmodelled and not graph.unmodelled
    # a replay is one call of each captured op: the same work as running them eagerly, the fused Triton kernel
    # priced from its region's inputs and outputs
    assert _by_name(graph) == _by_name(eager)
    mm = next(g for g in graph.groups if g.name == "aten::mm")
    assert mm.calls == 6 and mm.flops == 6 * 2 * 16 * 2048 * 8192
    assert graph.graph_replays == {"captures": 1, "replays": 6, "priced_replays": 6, "ambiguous_replays": 0,
                                   "partly_matched_replays": 0, "priced_by_eager_twin": 0}
    # each replay's kernel is its own call (the op chains follow calls)
    silu_rows = [r for g in graph.groups if g.name == SILU for r in g.rows]
    assert len({int(o) for r, o in zip(graph.kernel_rows, graph.kernel_ops) if r in silu_rows}) == 6


def test_the_doctor_judges_replays_against_their_roofs(tmp_path):
    trace = _graphed(tmp_path)
    report = diagnose(trace)
    assert not any(f.summary.startswith("Not judged") for f in report.findings)
    sol = report.analyses["speed_of_light"]
    assert "graph_replay" not in sol.get("unmodelled", {})
    assert {r["op"] for r in sol["ops"]} >= {"aten::mm", SILU, "aten::add"}
    # the capture's launches ran nothing by design: no missing kernel records
    assert launch_records(trace)["unrecorded"] == 0 and record_notes(trace) == []


def test_a_name_that_disagrees_stops_the_match_there(tmp_path):
    nodes = sg.capture(TraceBuilder(), _ops())
    nodes[1] = ("triton", "triton_poi_fused_mul_silu_1", 3.0)   # not the kernel the op named
    work = _work(_graphed(tmp_path, replay_nodes=nodes))
    assert {g.name for g in work.groups if g.family != "copy"} == {"aten::mm"}
    assert work.unmodelled["graph_replay"]["kernels"] == 2 * 6      # the Triton kernel and the add
    assert work.graph_replays["partly_matched_replays"] == 6
    assert any(g.family == "copy" for g in work.groups)              # memsets carry their own bytes


def test_a_kind_that_disagrees_stops_the_match_there(tmp_path):
    nodes = sg.capture(TraceBuilder(), _ops())
    del nodes[2]                                                      # the memset is not in the replay
    work = _work(_graphed(tmp_path, replay_nodes=nodes))
    names = {g.name for g in work.groups}
    assert "aten::mm" in names and SILU in names and "aten::add" not in names
    assert work.unmodelled["graph_replay"]["names"].keys() == {ELEMENTWISE}


def test_a_replay_on_several_streams_is_matched_only_on_its_first(tmp_path):
    work = _work(_graphed(tmp_path, streams=[7, 7, 9, 7]))
    assert {g.name for g in work.groups if g.family != "copy"} == {"aten::mm", SILU}
    assert work.graph_replays["partly_matched_replays"] == 6


def test_captures_of_different_work_that_agree_equally_leave_the_replay_unpriced(tmp_path):
    # one graph per batch size, as serving engines capture: same kernels, different shapes, no graph id to pick one
    work = _work(_graphed(tmp_path, caps=(16, 32)))
    assert work.graph_replays["ambiguous_replays"] == 6 and work.graph_replays["priced_replays"] == 0
    assert work.unmodelled["graph_replay"]["kernels"] == 3 * 6
    # the same work captured twice is no ambiguity
    same = _work(_graphed(tmp_path, caps=(16, 16), name="same"))
    assert same.graph_replays["priced_replays"] == 6 and "graph_replay" not in same.unmodelled


def test_a_whole_match_wins_over_a_longer_capture(tmp_path):
    b = TraceBuilder()
    short = sg.capture(b, _ops(32)[:2])          # mm and silu of batch 32: the replayed graph
    sg.capture(b, _ops(16))                      # a later, longer capture that starts with the same kinds
    b.synchronize()
    for n in range(4):
        with b.step(n):
            sg.replay(b, short)
            b._wait_all("cudaStreamSynchronize", streams=[7])
    work = _work(_load(tmp_path, b, "two"))
    mm = next(g for g in work.groups if g.name == "aten::mm")
    assert mm.dims.startswith("[[32,2048]") and mm.calls == 4


def test_a_capture_after_the_replay_is_not_its_graph(tmp_path):
    b = TraceBuilder()
    nodes = [node for op in _ops() for node in op[3]]
    for n in range(4):
        with b.step(n):
            sg.replay(b, nodes)
            b._wait_all("cudaStreamSynchronize", streams=[7])
    sg.capture(b, _ops())
    trace = _load(tmp_path, b, "late")
    assert len(captures(trace)) == 1
    work = _work(trace)
    assert work.graph_replays["priced_replays"] == 0 and work.unmodelled["graph_replay"]["kernels"] == 3 * 4


def test_launches_that_ran_are_not_captured(tmp_path):
    # an op run eagerly inside the capture window (another stream, relaxed mode) has its kernel: not a graph node
    b = TraceBuilder()
    ops = _ops()
    sg.capture(b, ops[:1])
    end = b.events[-2]                                   # cudaStreamEndCapture: move it after an eager op
    assert end["name"] == "cudaStreamEndCapture"
    b.op("aten::add", [(ELEMENTWISE, 2.0)], dims=ops[3][1], dtypes=ops[3][2], stream=9)
    end["ts"] = b.now
    trace = _load(tmp_path, b, "eager_inside")
    (cap,) = captures(trace)
    assert cap.launches.size == 1 and trace.name_of(int(cap.ops[0])) == "aten::mm"
    assert launch_records(trace)["unrecorded"] == 0
    assert replayed_ops(trace, trace.rows(trace.kind < 0)).stats == {
        "captures": 1, "replays": 0, "priced_replays": 0, "ambiguous_replays": 0, "partly_matched_replays": 0}


def test_without_the_capture_the_note_says_how_to_record_it(tmp_path):
    b = TraceBuilder()
    nodes = [(node[0], node[1], 100 * node[2], *node[3:]) for op in _ops() for node in op[3]]
    for n in range(6):      # a serving loop: the host far ahead, the GPU busy with one replay after the other
        sg.replay(b, nodes)
    report = diagnose(_load(tmp_path, b, "nocapture"))
    note = next(f for f in report.findings if f.summary.startswith("Not judged"))
    assert HOW_TO_RECORD in note.summary and HOW_TO_RECORD in note.evidence["why"]
    # the memsets carry their bytes and are priced; every kernel is a replay with no op
    assert note.evidence["why"].startswith(f"{note.evidence['unjudged_gpu_time_pct']:.0f}% of its GPU time is "
                                           "replayed from CUDA graphs")


@pytest.mark.parametrize("name", ["graphed_decode_trim", "profile_as_module_mode_reduce_overhead"])
def test_recorded_replays_without_their_capture_stay_unpriced(name):
    from pathlib import Path

    trace = kineto.load(Path(__file__).parents[1] / "data" / "stacks" / f"{name}.trace.json.gz")
    assert captures(trace) == []
    work = _work(trace)
    assert work.graph_replays["captures"] == 0 and work.unmodelled["graph_replay"]["kernels"] > 0


STACKS = Path(__file__).parents[1] / "data" / "stacks"


@pytest.mark.parametrize("name, launches, replays", [("graphed_decode_capture", 862, 18),
                                                     ("block_module_reduce_overhead_cold", 12, 7)])
def test_recorded_replays_are_priced_from_their_capture(name, launches, replays):
    trace = kineto.load(STACKS / f"{name}.trace.json.gz")
    caps = captures(trace)
    assert [int(c.launches.size) for c in caps] == [launches]
    work = op_work(trace, analysis_windows(trace))
    assert work.graph_replays["replays"] >= replays
    assert work.graph_replays["priced_replays"] == work.graph_replays["replays"]
    assert work.modelled_us >= 0.99 * work.kernel_us


def test_recorded_graphed_decode_is_judged_against_its_roofs_not_left_unjudged():
    trace = kineto.load(STACKS / "graphed_decode_capture.trace.json.gz")
    report = diagnose(trace)
    text = " ".join(f.summary for f in report.findings)
    assert "Not judged" not in text and HOW_TO_RECORD[:40] not in text
    top = report.findings[0]
    assert top.id != "healthy"
    # the decode's elementwise ops run on a few dozen blocks, far under the 132 SMs and their memory roof
    assert top.id in {"small-grid", "below-roof", "launch-overhead"}, top.id
