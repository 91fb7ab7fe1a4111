"""What a careful reading of each real profile gives, from other projects' machines and Kineto versions.

The numbers below were read from the raw JSON of each trace, independently of perflab's reader: its
ProfilerStep ranges (or the repetitions a person would call steps), its blocking runtime calls, the union of
its kernel/copy/memset intervals over the steps' span, and its memcpy records by direction. Busy percentages
allow a few points because perflab's windows end when a step's GPU work is done, not when its host range
ends. Skipped where ../shared is absent.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from perflab.analysis.reports.summary import evidence_summary
from perflab.doctor import diagnose
from perflab.trace.kineto import load_ranks

SHARED = Path(__file__).resolve().parents[3] / "shared"
REAL = Path(os.environ.get("PERFLAB_REAL_TRACES", SHARED / "real-traces"))
PEER = Path(os.environ.get("PERFLAB_PEER_TRACES", SHARED / "peer-traces" / "hta"))

# file: steps, blocking runtime calls inside the steps {name: count}, GPU busy % (+-tol), copies {dir: (count, bytes)}
READINGS = {
    # 2021 Kineto (Operator/Runtime/Kernel): ProfilerStep#5-10; each step copies its 19.3 MB batch and 256 B of labels
    # from pageable memory and synchronizes after each; a cudaDeviceSynchronize follows the last step
    REAL / "kineto_resnet50_v100_nw4.json.gz":
        (6, {"cudaStreamSynchronize": 12}, 72.4, 2.5, {"h2d": (12, 115_607_040)}),
    # vLLM decode with piecewise CUDA graphs: 10 engine steps, each one execute_context annotation; the scheduler
    # waits on cudaEventSynchronize twice a step while the GPU keeps running the queued graphs
    REAL / "nvllm_gb10_vllm_decode.json.gz":
        (10, {"cudaEventSynchronize": 20}, 98.4, 1.5, {"h2d": (170, 370_360), "d2h": (10, 160), "d2d": (40, 39_731_840)}),
    # 40 SGD iterations, no ProfilerStep: one Optimizer.zero_grad per iteration marks them
    REAL / "param_linear_2080ti.json.gz": (40, {}, 36.8, 2.0, {}),
    # one vLLM execute_context (an 888-token prefill) in eager mode; .item() only on CPU tensors: no sync
    REAL / "tracelens_b200_vllm_eager.json.gz": (1, {}, 13.5, 1.0, {"h2d": (15, 33_109), "d2d": (146, 771_323_904)}),
    REAL / "tracelens_h100_bert_small.json.gz": (1, {"cudaStreamSynchronize": 1}, 7.0, 1.0, {"d2h": (1, 1)}),
    # ROCm: hip* runtime, RCCL's ncclDevKernel_Generic; 3 DDP steps. The host runs ~30 ms ahead: on the GPU's clock
    # the steps run from 30.08 to 86.60 ms after the first ProfilerStep opens, the kernel/copy union covering 99.5 %
    # of it (over the host's ProfilerStep span it is 95.1 %: that span holds the end of step 14's work, with the 184
    # device-to-device copies whose launch the trace does not hold and whose size it does not say). The three steps
    # launch 366 copies of 70,195,152 bytes in all.
    REAL / "tracelens_mi300x_resnet_ddp.json.gz": (3, {}, 99.5, 0.5, {"d2d": (366, 70_195_152)}),
    PEER / "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz": (2, {"hipMemcpyWithStream": 2}, 1.6, 0.5,
                                                                    {"h2d": (2, 0)}),
    # a benchmark harness: warm-up and measured forwards under one wrapper range, no step marker
    PEER / "critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz":
        (0, {"cudaStreamSynchronize": 16}, 0.5, 0.2, {"h2d": (16, 244_403_360)}),
    PEER / "critical_path__simple_add__benchmark_result_493459_1694039959_trace.json.gz":
        (0, {"cudaStreamSynchronize": 16}, 0.3, 0.2, {"h2d": (16, 244_403_360)}),
    PEER / "critical_path__cuda_event_sync_multi_stream__event_sync_trace.json.gz": (0, {}, 1.9, 0.3, {}),
    PEER / "df_index_resolver__df_index_resolver.json.gz": (5, {}, 57.6, 2.0, {"d2d": (2040, 5_892_787_600)}),
    PEER / "nccl_parser_config__nccl_data.json.gz": (3, {"cudaEventSynchronize": 24}, 23.6, 2.0, {"d2d": (960, 307_323_096)}),
    PEER / "negative_queue_length_values_check__rank0.json.gz":
        (5, {"cudaStreamSynchronize": 75}, 35.5, 2.0,
         {"h2d": (80, 253_540_804), "d2h": (30, 8_600), "d2d": (1280, 16_637_320_108)}),
    PEER / "ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz": (5, {}, 97.4, 1.5, {"d2d": (1600, 512_205_160)}),
    PEER / "trace_diff__control__control.json.gz":
        (6, {"cudaStreamSynchronize": 60}, 83.5, 2.0, {"h2d": (150, 423_923_260), "d2h": (60, 100_896), "d2d": (18, 1_821_299_360)}),
    PEER / "trace_diff__test__test.json.gz":
        (6, {"cudaStreamSynchronize": 60}, 96.3, 1.5, {"h2d": (151, 423_923_264), "d2h": (60, 117_936), "d2d": (4645, 27_916_597_296)}),
    # sampled traces keep no cudaStreamSynchronize; .item() copies to pageable memory and waits (the op is the sync)
    PEER / "trace_filter__sampled_rank-0.json.gz":
        (2, {}, 44.5, 2.0, {"h2d": (24, 4_866_112), "d2h": (8, 6_115), "d2d": (8, 209_194_904)}),
    PEER / "trace_filter__sampled_rank-1.json.gz":
        (2, {}, 46.8, 2.0, {"h2d": (24, 63_474_164), "d2h": (8, 2_396), "d2d": (8, 3_298_965_512)}),
}


def _runtime_syncs(names: dict) -> dict:
    return {n: c for n, c in names.items() if not n.startswith("aten::") and n != "cudaDeviceSynchronize"
            and n != "hipDeviceSynchronize"}


@pytest.mark.parametrize("path", list(READINGS), ids=lambda p: p.name[:40])
def test_a_careful_reading(path):
    if not path.is_file():
        pytest.skip("shared traces not available")
    steps, syncs, busy, tol, copies = READINGS[path]
    s = diagnose(path).analyses["summary"]
    assert s["steps"] == steps
    assert _runtime_syncs(s["syncs"]["names"]) == syncs
    assert s["gpu_busy_pct"] == pytest.approx(busy, abs=tol)
    assert {d: (c["count"], c["bytes"]) for d, c in s["copies"].items() if c["count"]} == copies


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.skip("shared traces not available")
    return path


def test_the_2021_resnet_steps_and_its_dataloader():
    """Was 0 steps, 0 syncs and one 'step' of 996 ms; its DataLoader __next__ ranges last 8.5 ms in all (4
    workers keep ahead), so the input pipeline is no finding."""
    report = diagnose(_need(REAL / "kineto_resnet50_v100_nw4.json.gz"))
    s = report.analyses["summary"]
    assert 110 < s["step_time_ms"] < 190 and s["copies"]["h2d"]["pageable_count"] == 12
    assert report.analyses["idle"]["by_cause_pct"]["input"] < 2 and "input-pipeline" not in report.ids()
    assert report.findings[0].id == "no-tensor-cores"  # fp32 convolutions on a V100, no AMP


def test_the_vllm_decode_steps_are_its_engine_steps():
    report = diagnose(_need(REAL / "nvllm_gb10_vllm_decode.json.gz"))
    assert "execute_context_0(0)_generation_4(4)" in report.source["window"]["found_by"]
    assert 70 < report.analyses["summary"]["step_time_ms"] < 85  # 10 steps in 775 ms
    # busy, but its roofs cannot be judged: most GPU time is CUDA-graph replays, which no op launches. Not judged
    # is not healthy: the headline says so, with the kernels and the ncu command
    top = report.findings[0]
    assert top.id == "not-judged" and top.severity == "info" and report.verdict.startswith("Not judged")
    assert top.evidence["unjudged_gpu_time_pct"] > 80 and top.evidence["ncu_command"].startswith("perflab ncu")
    unjudged = top.evidence["why"]
    assert unjudged.startswith("83% of its GPU time is replayed from CUDA graphs")
    assert "CUDA graphs off" in unjudged and "record the capture too" in unjudged   # vLLM's warm-up captures them


def test_the_linear_model_iterations():
    report = diagnose(_need(REAL / "param_linear_2080ti.json.gz"))
    assert "40 iterations" in report.source["window"]["found_by"]
    # 8716 kernels: 40 iterations of ~217, and a few launched before the first iteration's marker
    assert report.analyses["launches"]["kernels_per_step"] == pytest.approx(8716 / 40, abs=2)
    assert 24 < report.analyses["summary"]["step_time_ms"] < 26.5


def test_vllm_eager_on_b200_all_reduces_in_symmetric_memory():
    report = diagnose(_need(REAL / "tracelens_b200_vllm_eager.json.gz"))
    # 73 multimem_all_reduce_kernel (tensor-parallel all-reduces in symmetric memory) and one NCCL all-gather
    assert report.analyses["kernels"]["by_type"]["communication"]["count"] == 74
    assert report.findings[0].id == "launch-overhead"  # 768 kernels, eager mode, GPU 13% busy


def test_rocm_resnet_ddp_communication_is_rccl():
    report = diagnose(_need(REAL / "tracelens_mi300x_resnet_ddp.json.gz"))
    assert report.source["device"] == "AMD Instinct MI300X"
    assert report.analyses["kernels"]["by_type"]["communication"]["count"] > 0
    assert report.findings[0].id == "comm-not-overlapped"


def test_the_eight_dlrm_ranks():
    """One profiled step per rank; ten stream syncs each; busy from 21 % (rank 7) to 62 % (rank 1)."""
    traces = load_ranks(_need(REAL / "param_dlrm_v100_8rank"))
    busy = {0: 45.6, 1: 61.9, 2: 33.1, 3: 55.4, 4: 42.8, 5: 40.9, 6: 33.3, 7: 21.3}
    assert [t.rank for t in traces] == list(range(8))
    for t in traces:
        s = evidence_summary(t)
        assert s["steps"] == 1 and s["syncs"]["names"].get("cudaStreamSynchronize") == 10
        assert s["gpu_busy_pct"] == pytest.approx(busy[t.rank], abs=2.0)
        assert {d: (c["count"], c["bytes"]) for d, c in s["copies"].items() if c["count"]} == \
            {"h2d": (13, 31_112), "d2h": (2, 216), "d2d": (1, 46_656)}


@pytest.mark.parametrize("name, verdict", [
    ("zoology_a100_cpu_activity_only.json.gz", "GPU activity was not recorded"),
])
def test_recordings_without_the_gpu(name, verdict):
    report = diagnose(_need(REAL / name))
    assert report.findings == [] and report.verdict.startswith(verdict)
