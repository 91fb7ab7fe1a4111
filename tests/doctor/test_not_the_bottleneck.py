"""Processes that are not the GPU's bottleneck: blocking waits are waiting, not host compute; a process
with no GPU work says so; a recording without GPU activity says how to record it; allocator churn is
named from the allocator calls."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from perflab.doctor import diagnose
from perflab.trace.builders import synthetic

REAL = Path(os.environ.get("PERFLAB_REAL_TRACES", Path(__file__).resolve().parents[3] / "shared" / "real-traces"))
PEER = Path(os.environ.get("PERFLAB_PEER_TRACES", Path(__file__).resolve().parents[3] / "shared" / "peer-traces" / "hta"))


def _frames(tid: int, stack: list[str], ts: float, dur: float) -> list[dict]:
    """Nested python_function frames, outermost first, each 1 µs inside its parent."""
    return [{"ph": "X", "cat": "python_function", "name": name, "pid": 77, "tid": tid,
             "ts": ts + i, "dur": dur - 2 * i} for i, name in enumerate(stack)]


def vllm_front_end(seconds: float = 23.9) -> dict:
    """An API server process: no GPU work; its event loop sits in epoll, one thread in a ZeroMQ poll for the
    engine's outputs, one in multiprocessing.connection.wait on the engine process; a request handled now
    and then (tokenize, build the request: ~0.4 ms)."""
    t0, span = 1_000_000.0, seconds * 1e6
    events = _frames(2, ["multiprocessing/connection.py(1136): wait", "selectors.py(415): select",
                         "<built-in method poll of select.poll object at 0x7f3a>"], t0, span)
    events += _frames(3, ["vllm/v1/engine/core_client.py(640): process_outputs_socket",
                          "zmq/sugar/poll.py(106): poll"], t0, span)
    t, period = t0, 100_000.0
    while t + period <= t0 + span:
        events += _frames(1, ["asyncio/base_events.py(1922): _run_once", "selectors.py(468): select",
                              "<built-in method poll of select.epoll object at 0x7f11>"], t, period - 400.0)
        events += _frames(1, ["vllm/entrypoints/openai/serving_chat.py(211): create_chat_completion",
                              "transformers/tokenization_utils_base.py(2800): encode"], t + period - 399.0, 398.0)
        t += period
    return synthetic.document(events)


def test_a_serving_front_end_that_only_waits_says_so(tmp_path):
    """Was host-compute, high, ~100 %, "vectorize it"."""
    report = diagnose(synthetic.write_document(tmp_path / "api_server.json", vllm_front_end()))
    assert report.findings == []
    assert report.verdict.startswith("No GPU work in this process")
    waits = report.analyses["waits"]
    assert waits["wait_pct"] > 99 and waits["recorded_us"] > 23e6
    assert {w["name"] for w in waits["top_waits"][:3]} >= {"multiprocessing/connection.py(1136): wait",
                                                           "zmq/sugar/poll.py(106): poll"}
    assert "vectorize" not in report.verdict


def test_a_cpu_workload_still_gets_its_cpu_findings_without_its_waits(tmp_path):
    """The CPU rules stay for a process that computes; a wait on its step thread is not Python work."""
    build = synthetic.TraceBuilder()
    for n in range(4):
        with build.step(n):
            with build.span("featurize.py(12): featurize", cat="python_function"):
                build.python(6000.0)
            with build.span("queue.py(154): get", cat="python_function"):
                build.python(6000.0)
            build.host("aten::mm", 2000.0)
    report = diagnose(build.write(tmp_path / "cpu.json"))
    assert report.verdict.startswith("CPU-only trace (no GPU activity)")
    host = next(f for f in report.findings if f.id == "host-compute")
    assert 40 < host.evidence["long_python_pct"] < 45 and 40 < host.evidence["wait_pct"] < 45


def _without_gpu_rows(doc: dict) -> dict:
    doc["traceEvents"] = [e for e in doc["traceEvents"]
                          if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset", "ac2g")]
    return doc


def test_a_cpu_activity_only_recording_says_the_gpu_was_not_recorded(tmp_path):
    doc = _without_gpu_rows(synthetic.host_bound(steps=3).to_dict())
    report = diagnose(synthetic.write_document(tmp_path / "cpu_activity.json", doc))
    assert report.findings == []
    assert report.verdict.startswith("GPU activity was not recorded")
    assert "ProfilerActivity.CUDA" in report.verdict
    assert report.analyses["recording"]["launch_names"]["cudaLaunchKernel"] == 60


def test_the_real_cpu_activity_only_profile():
    path = REAL / "zoology_a100_cpu_activity_only.json.gz"
    if not path.is_file():
        pytest.skip("real traces not available")
    report = diagnose(path)
    rec = report.analyses["recording"]
    assert report.findings == [] and report.verdict.startswith("GPU activity was not recorded")
    assert rec["launch_names"] == {"cudaLaunchKernel": 236, "cuLaunchKernel": 24, "cudaMemcpyAsync": 8}


def test_cupti_profiler_ranges_are_no_timeline():
    path = PEER / "cupti_profiler__benchmark_result_924719_1679055439_trace.json.gz"
    if not path.is_file():
        pytest.skip("peer traces not available")
    report = diagnose(path)
    assert report.findings == [] and "77 CUPTI profiler ranges" in report.verdict
    assert "Nsight Compute" in report.verdict


def test_an_engine_waiting_for_requests_is_not_host_compute(tmp_path):
    """A GPU process whose host thread waits on its request queue between short steps."""
    build = synthetic.TraceBuilder()
    for n in range(5):
        with build.step(n):
            with build.span("queue.py(154): get", cat="python_function"), \
                    build.span("<built-in method acquire of _thread.lock object at 0x7f>", cat="python_function"):
                build.python(8000.0)
            for _ in range(10):
                build.op("aten::mm", [(synthetic.GEMM, 150.0, (132, 1, 1), (384, 1, 1))], cpu_us=12.0)
            build.synchronize()
    report = diagnose(build.write(tmp_path / "engine.json"))
    assert "host-compute" not in report.ids()
    top = report.findings[0]
    assert top.id == "gpu-idle" and top.evidence["host_wait_idle_pct"] > 70
    assert "queue.py(154): get" in top.evidence["host_waits"] and "not computing" in top.summary


# -- allocator churn ---------------------------------------------------------------------------------

def empty_cache_every_step(steps: int = 4, free: str = "cudaFree", malloc: str = "cudaMalloc") -> synthetic.TraceBuilder:
    """torch.cuda.empty_cache() after every step: the next step's allocations go to cudaMalloc again
    (under aten::empty), and each cudaFree first waits for the device to finish."""
    build = synthetic.TraceBuilder()
    for n in range(steps):
        with build.step(n):
            for _ in range(3):
                with build.span("aten::empty"):
                    build._x("cuda_runtime", malloc, build.now, 1500.0, correlation=0)
                    build.now += 1500.0
            for _ in range(8):
                build.op("aten::mm", [(synthetic.GEMM, 250.0, (132, 1, 1), (384, 1, 1))], cpu_us=12.0)
            for _ in range(3):  # empty_cache(): cudaFree drains the GPU, then frees
                done = max(build.now, max(build.free_at.values()))
                build._x("cuda_runtime", free, build.now, done - build.now + 900.0, correlation=0)
                build.now = done + 900.0
    return build


def test_empty_cache_every_step_is_allocator_churn(tmp_path):
    """Was host-compute 'inside aten::empty'."""
    report = diagnose(empty_cache_every_step().write(tmp_path / "t.json"))
    top = report.findings[0]
    assert top.id == "allocator-churn" and top.severity == "high"
    assert top.evidence["allocator_calls"] == {"cudaMalloc": 12, "cudaFree": 12}
    assert top.evidence["allocator_calls_per_step"] == 6 and top.evidence["allocator_time_pct"] > 60
    assert top.gain_pct > 50 and "empty_cache" in top.fix
    assert not any(f.id == "host-compute" and f.severity == "high" for f in report.findings)
    assert top.events and top.events[0].name in ("cudaMalloc", "cudaFree")


@pytest.mark.parametrize("free, malloc", [("cudaFree_v3020", "cudaMalloc_v3020"), ("hipFree", "hipMalloc"),
                                          ("cuMemFree_v2", "cuMemAlloc_v2")])
def test_allocator_churn_reads_the_call_names_of_every_runtime(tmp_path, free, malloc):
    """Nsight Systems (versioned names), ROCm and the driver API name the same calls differently."""
    report = diagnose(empty_cache_every_step(free=free, malloc=malloc).write(tmp_path / "t.json"))
    assert report.findings[0].id == "allocator-churn"
    assert report.findings[0].evidence["allocator_calls"] == {malloc: 12, free: 12}


def test_allocations_the_gpu_never_waits_for_are_no_finding(tmp_path):
    """A cudaMalloc while the GPU still has long work queued costs nothing."""
    build = synthetic.TraceBuilder()
    for n in range(4):
        with build.step(n):
            for _ in range(8):
                build.op("aten::mm", [(synthetic.GEMM, 900.0, (132, 1, 1), (384, 1, 1))], cpu_us=12.0)
            with build.span("aten::empty"):
                build._x("cuda_runtime", "cudaMalloc", build.now, 300.0, correlation=0)
                build.now += 300.0
    build.synchronize()
    assert "allocator-churn" not in diagnose(build.write(tmp_path / "t.json")).ids()
