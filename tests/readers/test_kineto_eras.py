"""Kineto of every era and vendor: 2021 category spellings, ROCm runtime names and RCCL, communication
kernels beyond NCCL, CUDA-graph replays, and steps found without ProfilerStep ranges.

Each case is one synthetic workload written in the spelling of another era or vendor; the reading must
not depend on the spelling.
"""
from __future__ import annotations

import re

import pytest

from perflab.doctor import diagnose
from perflab.trace import kineto
from perflab.trace.builders import synthetic
from perflab.trace.model import CPU_OP, KERNEL, MEMCPY, RUNTIME

# torch 1.8 / Kineto 2021: record_function and ProfilerStep ranges are "Operator"s, thread ids are strings,
# GPU rows sit on "stream N" threads
_CATS_2021 = {"cpu_op": "Operator", "user_annotation": "Operator", "cuda_runtime": "Runtime", "kernel": "Kernel",
              "gpu_memcpy": "Memcpy", "gpu_memset": "Memset"}


def _as_2021(doc: dict) -> dict:
    for e in doc["traceEvents"]:
        if e.get("ph") != "X" or e.get("cat") not in _CATS_2021:
            continue
        gpu = e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")
        e["cat"] = _CATS_2021[e["cat"]]
        e["tid"] = f"stream {e['args']['stream']}" if gpu else str(e["tid"])
    return doc


def _as_rocm(doc: dict) -> dict:
    for e in doc["traceEvents"]:
        if e.get("cat") == "cuda_runtime":
            e["name"] = re.sub(r"^cuda", "hip", e["name"])
        elif e.get("cat") == "kernel" and e["name"].startswith("nccl"):
            e["name"] = "ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)"  # RCCL's generic kernel
    doc["deviceProperties"] = [{"id": 0, "name": "AMD Instinct MI300X"}]
    return doc


def _summary(report) -> dict:
    s = report.analyses["summary"]
    return {"steps": s["steps"], "busy": round(s["gpu_busy_pct"], 1), "syncs": s["syncs"]["count"],
            "copies": {d: (c["count"], c["bytes"]) for d, c in s["copies"].items()}, "top": report.findings[0].id}


def test_a_2021_trace_reads_like_todays(tmp_path):
    """Operator/Runtime/Kernel/Memcpy: on the old reader 0 steps and 0 syncs (every row 'other')."""
    build = synthetic.pageable_inputs(steps=4)
    today = diagnose(build.write(tmp_path / "today.json"))
    old = diagnose(synthetic.write_document(tmp_path / "2021.json", _as_2021(build.to_dict())))
    t = kineto.load(tmp_path / "2021.json")
    assert {int(k) for k in set(t.kind.tolist())} >= {CPU_OP, RUNTIME, KERNEL, MEMCPY}
    assert _summary(old) == _summary(today)
    assert old.analyses["summary"]["steps"] == 4 and old.analyses["summary"]["syncs"]["count"] >= 4
    assert old.findings[0].id == "pageable-memcpy"


def test_a_2021_dataloader_range_is_the_input_pipeline(tmp_path):
    build = synthetic.input_bound(steps=4)
    report = diagnose(synthetic.write_document(tmp_path / "2021.json", _as_2021(build.to_dict())))
    assert report.findings[0].id == "input-pipeline"
    assert report.analyses["idle"]["by_cause_pct"]["input"] > 50


def test_rocm_runtime_names_and_rccl_read_like_cuda(tmp_path):
    build = synthetic.exposed_allreduce(steps=4)
    cuda = diagnose(build.write(tmp_path / "cuda.json"))
    rocm = diagnose(synthetic.write_document(tmp_path / "rocm.json", _as_rocm(build.to_dict())))
    assert rocm.source["device"] == "AMD Instinct MI300X"
    assert rocm.analyses["summary"]["syncs"]["names"] == {"hipDeviceSynchronize": 4}
    assert rocm.analyses["kernels"]["by_type"]["communication"]["total_us"] == \
        cuda.analyses["kernels"]["by_type"]["communication"]["total_us"]
    assert rocm.findings[0].id == cuda.findings[0].id == "comm-not-overlapped"


@pytest.mark.parametrize("name", [
    "void deep_ep::intranode::dispatch<8, 768, 6144>(int4*, float*, int*, long*, float*, int*, bool*)",
    "void deep_ep::internode_ll::combine<false, 7168>(void*, void*, int*, void*, void*, int*, long*)",
    "nvshmemi_transfer_rma_kernel",
    "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, int)",
    "void tensorrt_llm::kernels::oneShotAllReduceKernel<__nv_bfloat16, 8, false>(tensorrt_llm::kernels::AllReduceParams)",
    "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, unsigned long)",
])
def test_communication_kernels_beyond_nccl_are_communication(tmp_path, name):
    """DeepEP dispatch/combine counted as 'other' (0 µs of communication) on the old head."""
    build = synthetic.TraceBuilder(rank=0, world_size=8)
    for n in range(3):
        with build.step(n):
            for _ in range(10):
                build.op("aten::mm", [(synthetic.GEMM, 300.0, (132, 1, 1), (384, 1, 1))], cpu_us=12.0)
            build.wait_stream(20, 7)
            build.collective(2500.0, name=name)
            build.wait_stream(7, 20)
            build.synchronize()
    report = diagnose(build.write(tmp_path / "t.json"))
    comm = report.analyses["kernels"]["by_type"]["communication"]
    assert comm["count"] == 3 and comm["total_us"] == pytest.approx(3 * 2500.0)
    assert report.findings[0].id == "comm-not-overlapped"


@pytest.mark.parametrize("launch", ["cudaGraphLaunch", "hipGraphLaunch"])
def test_cuda_graph_replays_link_every_kernel_to_its_graph_launch(tmp_path, launch):
    doc = synthetic.cuda_graph_replay(steps=3, ops=200).to_dict()
    for e in doc["traceEvents"]:
        if e.get("name") == "cudaGraphLaunch":
            e["name"] = launch
    report = diagnose(synthetic.write_document(tmp_path / "t.json", doc))
    launches = report.analyses["launches"]
    assert launches["linked_pct"] == 100.0 and launches["kernels_per_step"] == 200
    # the replayed kernels are queued together: the gaps between them are the device's, not the host's
    assert report.analyses["idle"]["by_cause_pct"]["launch"] < 1
    assert "launch-overhead" not in report.ids()


# -- steps without ProfilerStep ----------------------------------------------------------------------

def _rename_steps(doc: dict, name: str, cat: str = "user_annotation") -> dict:
    for e in doc["traceEvents"]:
        if str(e.get("name", "")).startswith("ProfilerStep#"):
            e["name"], e["cat"] = name, cat
    return doc


def test_steps_from_a_repeated_user_annotation(tmp_path):
    build = synthetic.launch_bound(steps=5, ops=100)
    report = diagnose(synthetic.write_document(tmp_path / "t.json", _rename_steps(build.to_dict(), "serve_step")))
    window = report.source["window"]
    assert window["kind"] == "steps" and window["steps"] == [0, 1, 2, 3, 4]
    assert "5 annotations 'serve_step'" in window["found_by"] and "no ProfilerStep" in window["found_by"]
    assert report.analyses["summary"]["steps"] == 5 and report.analyses["launches"]["kernels_per_step"] == 100
    assert report.findings[0].id == "launch-overhead"


def test_steps_from_repeated_top_level_module_calls(tmp_path):
    build = synthetic.host_bound(steps=4)
    doc = _rename_steps(build.to_dict(), "nn.Module: Scorer_0", cat="python_function")
    report = diagnose(synthetic.write_document(tmp_path / "t.json", doc))
    assert report.analyses["summary"]["steps"] == 4
    assert "4 calls 'nn.Module: Scorer_0'" in report.source["window"]["found_by"]
    assert report.findings[0].id == "host-compute"
    # the module call itself is the step, not host work inside it
    assert "nn.Module: Scorer_0" not in report.findings[0].evidence["top_host_ops"]


def test_steps_from_an_iteration_marker_that_launches_little(tmp_path):
    """40 iterations of a training loop whose only per-iteration range is the optimizer's (param_linear-like)."""
    build = synthetic.TraceBuilder()
    for _ in range(12):
        with build.span("Optimizer.zero_grad#SGD.zero_grad", cat="user_annotation"):
            build.python(20.0)
        for _ in range(6):
            build.op("aten::mm", [(synthetic.GEMM, 150.0, (132, 1, 1), (384, 1, 1))], cpu_us=30.0)
        build.python(400.0)
        with build.span("Optimizer.step#SGD.step", cat="user_annotation"):
            build.op("aten::_foreach_add_", [(synthetic.ELEMENTWISE, 20.0)], cpu_us=40.0)
    build.synchronize()
    report = diagnose(build.write(tmp_path / "t.json"))
    window = report.source["window"]
    assert report.analyses["summary"]["steps"] == 12
    assert "12 iterations" in window["found_by"] and "Optimizer.zero_grad#SGD.zero_grad" in window["found_by"]
    assert report.analyses["launches"]["kernels_per_step"] == pytest.approx(7, abs=0.5)


def test_layers_are_not_steps_and_no_marker_says_so(tmp_path):
    build = synthetic.TraceBuilder()
    for _ in range(20):
        build.op("aten::linear", [(synthetic.GEMM, 200.0)], cpu_us=20.0)
    build.synchronize()
    report = diagnose(build.write(tmp_path / "t.json"))
    window = report.source["window"]
    assert window["kind"] == "gpu-span" and report.analyses["summary"]["steps"] == 0
    assert window["found_by"].startswith("no steps found")


def test_a_wrapper_around_set_up_and_run_is_not_a_step(tmp_path):
    """One range around minutes of set-up and then the GPU work (a benchmark harness): no step marker."""
    build = synthetic.TraceBuilder()
    with build.span("[bench|run]", cat="user_annotation"):
        build.host("aten::empty_strided", 50_000.0)  # CUDA initialization inside the first allocation
        for _ in range(10):
            build.op("aten::mm", [(synthetic.GEMM, 300.0)], cpu_us=15.0)
        build.synchronize()
    report = diagnose(build.write(tmp_path / "t.json"))
    assert report.source["window"]["kind"] == "gpu-span"
