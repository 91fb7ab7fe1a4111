"""The doctor on the stacks inference engineers run (recorded on an H100 with plain torch.profiler, record_shapes on,
no schedule): CUDA-graph replays as steps found from the GPU side, idle that the host cannot have caused, and
one-time costs per new shape. Fixtures in tests/data/stacks/ (trimmed by scripts/trim_trace.py)."""
import gzip
import json
from pathlib import Path

import pytest

from perflab.analysis.steps.graph_capture import HOW_TO_RECORD
from perflab.doctor import diagnose

STACKS = Path(__file__).parents[1] / "data" / "stacks"


def _ids(report, above=("high", "medium")):
    return [f.id for f in report.findings if f.severity in above]


def test_graphed_decode_steps_are_its_graph_replays():
    # 25 replays of one 862-op graph (Llama-3.2-1B decode, batch 16); no ProfilerStep, no annotation.
    report = diagnose(STACKS / "graphed_decode_trim.trace.json.gz")
    found = report.source["window"]["found_by"]
    assert "25 CUDA-graph replays of 862 GPU ops" in found
    # each replay runs ~3.51 ms on the GPU and the next starts ~47 µs after it: a step is ~3.56 ms
    assert 3.5 < report.analyses["summary"]["step_time_ms"] < 3.6
    # the host launched each replay tens of ms before the GPU ran it (the CPU far ahead, command buffer full):
    # the GPU's idle (~14 %, between the graph's 862 kernels) cannot be the host's, so no host finding
    assert "ms before the GPU ran them" in found
    busy = report.analyses["summary"]["gpu_busy_pct"]
    assert 80 < busy < 90
    assert not {"host-compute", "launch-overhead", "gpu-idle", "host-sync"} & set(_ids(report))
    # its kernels are replays: tied to no op with shapes, and said so, with how to record the graph's capture that
    # would price them (the window starts after it)
    assert report.analyses["speed_of_light"]["unmodelled"]["graph_replay"]["kernels"] > 800
    assert report.verdict.startswith("Not judged") and HOW_TO_RECORD in report.verdict


def test_reduce_overhead_replays_are_not_blamed_on_missing_shapes():
    # torch.compile(mode="reduce-overhead"): the kernels run from a CUDA graph inside 'Torch-Compiled Region';
    # record_shapes was on, so "profile with record_shapes=True" would be wrong advice
    report = diagnose(STACKS / "block_module_reduce_overhead.trace.json.gz")
    unmodelled = report.analyses["speed_of_light"]["unmodelled"]
    assert "no_shapes" not in unmodelled
    assert any(n.startswith("triton_") for n in unmodelled["graph_replay"]["names"])


def test_compiled_blocks_price_their_inductor_kernels():
    # default mode: each Inductor kernel is recorded as an op with its tensors, mm as aten::mm: priced
    for name in ("block_fn_default", "block_module_default"):
        report = diagnose(STACKS / f"{name}.trace.json.gz")
        step = report.analyses["speed_of_light"]["step"]
        assert step["coverage_pct"] > 99
        families = report.analyses["speed_of_light"]["families"]
        # the fused RMSNorm (triton_red_...) and SwiGLU/add (triton_poi_...) kernels run near the DRAM roof
        assert families["reduction"]["pct_of_roof"] > 70 and families["elementwise"]["pct_of_roof"] > 70


def _serving_trace(tmp_path, lead_us: float) -> Path:
    """One host step range launching two kernels at its start; the GPU runs them `lead_us` after the launches
    (busy with work launched before the trace began, which the trace does not hold)."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": "execute_model", "pid": 1, "tid": 1, "ts": 0, "dur": 400},
          {"ph": "X", "cat": "user_annotation", "name": "execute_model", "pid": 1, "tid": 1, "ts": 500, "dur": 400},
          {"ph": "X", "cat": "user_annotation", "name": "execute_model", "pid": 1, "tid": 1, "ts": 1000, "dur": 400}]
    t_gpu = 0.0
    for i, start in enumerate((100, 600, 1100)):
        for j in range(2):
            corr = 10 * i + j
            ts = start + 20 * j
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts,
                       "dur": 10, "args": {"correlation": corr}})
            t_gpu = max(t_gpu, ts + 10 + lead_us)
            ev.append({"ph": "X", "cat": "kernel", "name": "gemm_kernel", "pid": 0, "tid": 7, "ts": t_gpu, "dur": 500,
                       "args": {"correlation": corr, "device": 0, "stream": 7, "grid": [132, 1, 1], "block": [128, 1, 1]}})
            t_gpu += 500
    path = tmp_path / "serving.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": ev, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]}, f)
    return path


def test_idle_is_not_blamed_on_a_host_that_ran_ahead(tmp_path):
    # The host issued every launch 5+ ms before the GPU ran it; the GPU then ran its six 0.5 ms kernels back to
    # back. The GPU shows idle only before its first kernel, which it started 5 ms after the launch returned:
    # it was busy with earlier work, not waiting for the host. Before, the window began at the host's first step
    # and that idle was blamed on the host ("host-compute").
    report = diagnose(_serving_trace(tmp_path, lead_us=5_000))
    assert report.analyses["summary"]["gpu_busy_pct"] > 99
    assert not {"host-compute", "launch-overhead", "gpu-idle"} & {f.id for f in report.findings}
    assert "cut from the start of the windows" in report.source["window"]["found_by"]


def test_a_host_that_is_late_is_still_blamed(tmp_path):
    # The same program with the GPU starting each kernel right after its launch (no queue): the GPU waits on the
    # host between steps, which the doctor must still say.
    report = diagnose(_serving_trace(tmp_path, lead_us=5))
    assert report.analyses["summary"]["gpu_busy_pct"] < 99
    assert "cut from" not in report.source["window"]["found_by"]


def test_cudnn_plan_building_is_a_one_time_cost_per_shape():
    # HF generate, dynamic cache: each decode token attends over a KV one longer, a new shape for cuDNN SDPA,
    # whose first call per shape builds a plan (59-65 ms) while calls of a shape seen before take ~0.1 ms.
    # The window holds the last 4 tokens of the first generate call and the start of the second (shapes built).
    report = diagnose(STACKS / "hf_eager_dynamic_cold_3100_3750ms.trace.json.gz")
    top = report.findings[0]
    assert top.id == "host-compute"
    c = top.evidence["one_time_per_shape"]
    assert c["op"] == "aten::_cudnn_attention_forward"
    assert c["new_shapes"] == 4 and c["shapes"] == 20      # 4 new KV lengths; 16 more seen earlier in the process
    assert 50 < c["first_range_ms"][0] and c["first_range_ms"][1] < 70
    assert c["steady_ms"] < 0.2
    assert "one-time cost per new input shape" in top.summary
    assert "warm-up" not in top.summary.lower()


@pytest.mark.parametrize("name", ["hf_static_compiled_call1"])
def test_compiled_static_generate_decode_steps(name):
    # 31 decode steps, each a CUDA-graph replay (151 ops, ~0.74 ms of GPU) plus eager sampling: ~4.2 ms a step,
    # GPU busy ~20 %: the host (HF's generate loop) is the bottleneck, and the doctor says so
    report = diagnose(STACKS / f"{name}.trace.json.gz")
    assert len(report.source["window"]["steps"]) == 31 if "steps" in report.source["window"] else True
    assert 3.5 < report.analyses["summary"]["step_time_ms"] < 5.0
    assert report.analyses["summary"]["gpu_busy_pct"] < 30
    assert report.findings[0].id in ("launch-overhead", "host-compute")
