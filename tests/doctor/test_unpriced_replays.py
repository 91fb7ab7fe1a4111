"""Graph replays without their capture in the trace: priced by the same kernel launched eagerly (replay_twins), by
the capture perflab profile records during warm-up (toolkit/capture_record.py), or left `not-judged`, a verdict of
its own beside the system's."""
from __future__ import annotations

import gzip
import json

from perflab.analysis.steps.windows import analysis_windows
from perflab.analysis.work.op_work import op_work
from perflab.doctor import diagnose
from perflab.toolkit.capture_record import EXTERNAL_ID_OFFSET, CaptureRecorder
from perflab.trace import kineto
from perflab.trace.builders import synthetic_graphs as sg
from perflab.trace.builders.synthetic import ELEMENTWISE, GEMM, TraceBuilder

BF = "c10::BFloat16"


def _ops(batch: int = 16) -> list[tuple]:
    return [("aten::mm", [[batch, 2048], [2048, 8192]], [BF, BF], [("kernel", GEMM, 20.0)]),
            ("aten::add", [[batch, 2048], [batch, 2048]], [BF, BF], [("kernel", ELEMENTWISE, 2.0)])]


def _replays(b: TraceBuilder, steps: int = 6) -> None:
    nodes = [("kernel", GEMM, 20.0), ("kernel", ELEMENTWISE, 2.0)]
    for n in range(steps):
        with b.step(n):
            sg.replay(b, nodes)
            b._wait_all("cudaStreamSynchronize", streams=[7])


def _work(path):
    trace = kineto.load(path)
    return op_work(trace, analysis_windows(trace))


def test_a_replayed_kernel_takes_the_work_of_its_eager_twin(tmp_path):
    b = TraceBuilder()
    sg.eager(b, _ops())          # a prefill or warm-up runs the ops eagerly, with shapes, before the steps
    b.synchronize()
    _replays(b)
    work = _work(b.write(tmp_path / "t.json.gz"))
    assert work.graph_replays["priced_by_eager_twin"] == 12 and "graph_replay" not in work.unmodelled
    mm = next(g for g in work.groups if g.name == "aten::mm")
    assert mm.calls == 6 and mm.flops == 6 * 2 * 16 * 2048 * 8192


def test_twins_of_different_work_price_nothing(tmp_path):
    # the same kernel with the same grid ran eagerly for two shapes: which one a replay runs is unknown
    b = TraceBuilder()
    sg.eager(b, _ops(16))
    sg.eager(b, _ops(32))
    b.synchronize()
    _replays(b)
    work = _work(b.write(tmp_path / "t.json.gz"))
    assert work.graph_replays["priced_by_eager_twin"] == 0 and work.unmodelled["graph_replay"]["kernels"] == 12


def test_without_a_price_the_verdict_is_not_judged_beside_the_system_one(tmp_path):
    # replays of kernels nothing prices, and a host that makes the GPU wait after every replay
    b = TraceBuilder()
    for n in range(6):
        with b.step(n):
            sg.replay(b, [("kernel", GEMM, 400.0)] * 4)
            b._wait_all("cudaStreamSynchronize", streams=[7])
            b.host("aten::cpu_heavy_preprocessing", 1200.0)
    report = diagnose(b.write(tmp_path / "t.json.gz"))
    assert report.findings[0].level == "system" and report.findings[0].severity in ("high", "medium")
    nj = [f for f in report.findings if f.id == "not-judged"]
    assert len(nj) == 1 and nj[0].severity == "info" and nj[0].evidence["unjudged_gpu_time_pct"] == 100
    assert report.findings[-1].id == "not-judged" and "Kernels not judged: 100%" in report.verdict


def _capture_doc(tmp_path, base_ns: int) -> dict:
    """What a short torch.profiler run around one capture exports: its ops with shapes and their launches."""
    b = TraceBuilder(start_us=500.0)
    sg.capture(b, _ops())
    doc = b.to_dict()
    doc["baseTimeNanoseconds"] = base_ns
    return doc


def test_a_capture_recorded_in_warm_up_prices_the_replays(tmp_path):
    # the main recording: replays only (the capture happened in the warm-up, before it began)
    b = TraceBuilder(start_us=10_000.0)
    _replays(b)
    main = b.write(tmp_path / "trace.json.gz")
    before = diagnose(main)
    assert "not-judged" in before.ids()
    recorder = CaptureRecorder(torch=None, busy=lambda: False)
    cap = _capture_doc(tmp_path, base_ns=1_700_000_000_000_000_000 - 2_000_000)   # 2 ms earlier base
    events = [e for e in cap["traceEvents"] if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "cuda_runtime")]
    recorder.captures.append((cap["baseTimeNanoseconds"], events))
    assert recorder.merge_into(main) == 1
    with gzip.open(main, "rt") as fh:
        doc = json.load(fh)
    assert doc["perflab_captures"] == 1
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op" and e["name"] == "aten::mm"]
    assert ops and all(e["args"]["External id"] > EXTERNAL_ID_OFFSET for e in ops)   # apart from the main run's ids
    assert min(e["ts"] for e in ops) < 10_000.0 - 1_000   # shifted to the main recording's clock: before it
    after = diagnose(main)
    work = after.analyses["speed_of_light"]["step"]
    assert work["coverage_pct"] > 99 and "not-judged" not in after.ids()
