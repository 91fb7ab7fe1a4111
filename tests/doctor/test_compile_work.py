"""Compile work and missing kernel records in real H100 traces of a torch.compile'd block (tests/data/stacks,
recorded by scripts/record.py stacks): found, shared out over the window, and never judged as host work."""
import gzip
import json
from pathlib import Path

import pytest

from perflab.analysis.steps.compile_work import compile_work, is_compile_work, is_graph_capture
from perflab.analysis.steps.recording import unrecorded_kernels
from perflab.analysis.steps.windows import analysis_windows
from perflab.doctor import diagnose
from perflab.trace.kineto import load_ranks

STACKS = Path(__file__).parents[1] / "data" / "stacks"


def load(name):
    return load_ranks(STACKS / f"{name}.trace.json.gz")[0]


def test_compile_phases_and_captures_are_compile_work_and_compiled_code_is_not():
    for name in ("compile_attempt_0 (dynamo_timed)", "OutputGraph.call_user_compiler (dynamo_timed)", "dynamo",
                 "entire_frame_compile", "backend_compile", "CachingAutotuner.benchmark_all_configs",
                 "StaticAutotunerFuture.warm_precompile", "async_compile.wait",
                 "backend_compile_data: fn_name=OutputGraph.call_user_compiler, compile_id=0/0",
                 "triton/compiler/compiler.py(312): compile"):
        assert is_compile_work(name), name
    for name in ("Torch-Compiled Region: 0/0", "## Call CompiledFxGraph f27s ##", "TorchDynamo Cache Lookup",
                 "CompiledFunction", "triton_poi_fused_add_0", "aten::mm", "ProfilerStep#3"):
        assert not is_compile_work(name), name
    assert is_graph_capture("cudaStreamBeginCapture") and is_graph_capture("cudaGraphInstantiateWithFlags")
    assert not is_graph_capture("cudaGraphLaunch")


def test_a_window_recorded_while_compiling_is_mostly_compile_work():
    trace = load("profile_as_function_mode_default")  # perflab profile's time slices before this change
    work = compile_work(trace, analysis_windows(trace))
    assert 10 < work["share_pct"] < 30  # the ranges: Dynamo's 0.84 s of a 5.3 s window
    assert work["steps_with_compile"] >= 5 and work["steps_with_compile_pct"] > 80  # the steps holding them
    assert work["mostly_compile"] and work["names"][:1] == ["compile_attempt_0"]
    assert "OutputGraph.call_user_compiler" in work["names"]


def test_steady_compiled_windows_hold_no_compile_work():
    for name, replays in (("block_fn_default", 0), ("profile_as_module_mode_reduce_overhead", 10)):
        trace = load(name)
        work = compile_work(trace, analysis_windows(trace))
        assert work["compile_us"] == 0 and work["summary"] is None and not work["mostly_compile"]
        assert work["compiled_calls"] > 0 and work["graph_replays"] == replays


def test_a_cold_trace_holds_compile_work_outside_its_steps():
    trace = load("block_fn_default_cold")
    assert compile_work(trace)["compile_us"] > 50_000  # whole trace: Dynamo's compile is there
    assert compile_work(trace, analysis_windows(trace))["compile_us"] == 0  # the calls found as steps come after


def test_the_doctor_names_no_bottleneck_in_a_window_of_compilation():
    report = diagnose(STACKS / "profile_as_function_mode_default.trace.json.gz")
    assert report.findings == []
    assert report.verdict.startswith("The analysed window is compilation, not the program")
    assert "perflab profile" in report.verdict and report.analyses["compile_work"]["mostly_compile"]
    assert "host" not in report.verdict.split("Record after")[0].lower()


def test_the_doctor_judges_steady_compiled_traces_as_before():
    report = diagnose(STACKS / "block_fn_default.trace.json.gz")
    assert report.findings and report.analyses["compile_work"]["compile_us"] == 0
    assert not any("compile work" in n for n in report.source.get("notes", []))


def without_kernels(src: Path, dest: Path) -> Path:
    """The trace as a recording that lost its kernel records keeps it: launches and memsets, no kernel."""
    doc = json.load(gzip.open(src))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "kernel"]
    with gzip.open(dest, "wt") as fh:
        json.dump(doc, fh)
    return dest


def test_launches_without_kernel_records_are_never_judged_as_cpu_work(tmp_path):
    path = without_kernels(STACKS / "block_fn_default.trace.json.gz", tmp_path / "lost.trace.json.gz")
    trace = load_ranks(path)[0]
    missing = unrecorded_kernels(trace)
    assert missing["launches"] == 108 and set(missing["launch_names"]) == {"cuLaunchKernel", "cuLaunchKernelEx"}
    report = diagnose(path)
    assert report.findings == [] and "kernels were not recorded" in report.verdict
    assert "ProfilerActivity.CUDA" in report.verdict
    assert unrecorded_kernels(load("block_fn_default")) is None  # kernels there: nothing to say


@pytest.mark.parametrize("name", ["block_fn_default", "profile_as_module_mode_reduce_overhead"])
def test_compile_work_is_in_the_json_report(name):
    report = diagnose(STACKS / f"{name}.trace.json.gz")
    assert set(report.to_dict()["analyses"]["compile_work"]) >= {"share_pct", "names", "mostly_compile"}
