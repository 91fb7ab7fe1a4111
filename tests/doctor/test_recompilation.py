"""recompilation: compile work that comes back in most steps is the program's steady state; compile work in the first
step only stays the one-time cost it is. And matrix work on the SIMT path is never healthy."""
from __future__ import annotations

from perflab.analysis.steps.compile_work import compile_work
from perflab.analysis.steps.windows import analysis_windows
from perflab.doctor import diagnose
from perflab.trace.builders import synthetic_serving as ss
from perflab.trace.builders.synthetic import TraceBuilder
from perflab.trace.kineto import load


def test_a_function_that_compiles_in_every_step_is_recompilation(tmp_path):
    report = diagnose(ss.compiled_loop(8).write(tmp_path / "t.json.gz"))
    top = report.findings[0]
    assert top.id == "recompilation" and top.severity == "high" and top.level == "system"
    ev = top.evidence
    assert ev["steps_with_compile"] == 8 and ev["steps"] == 8 and ev["compile_ids"][-1] == "0/7"
    assert ev["recompiles_seen"] == 7 and 30 < ev["compile_ms_per_step"] < 50
    assert ev["changing_shapes"][0]["distinct_shapes"] == 8   # a sequence one longer each step
    assert "TORCH_LOGS=recompiles" in ev["reasons"] and "mark_dynamic" in top.fix
    assert "is the program's steady state, not a one-time cost" in report.verdict


def test_compile_work_in_the_first_step_only_is_a_one_time_cost(tmp_path):
    trace = load(ss.compiled_loop(8, recompile_every_step=False).write(tmp_path / "t.json.gz"))
    work = compile_work(trace, analysis_windows(trace))
    assert not work["recurring"] and work["steps_with_compile"] == 1 and "one-time cost" in work["summary"]
    assert "recompilation" not in diagnose(trace).ids()


def test_one_long_compile_across_time_slices_is_not_recompilation(tmp_path):
    # a single compile (one compile id) that spans every step: still one compile
    b = TraceBuilder()
    for n in range(6):
        with b.step(n):
            if n == 0:
                with b.span("dynamo_data: compile_id=0/0", cat="user_annotation"):
                    b.now += 1.0
            with b.span("compile_attempt_0 (dynamo_timed)", cat="user_annotation"):
                b.now += 30_000.0
    trace = load(b.write(tmp_path / "t.json.gz"))
    work = compile_work(trace, analysis_windows(trace))
    assert work["steps_with_compile"] == 6 and not work["recurring"] and work["mostly_compile"]


def test_fp32_attention_on_a_simt_kernel_is_no_tensor_cores_not_healthy(tmp_path):
    # [batch 8, sequence 2048, 16 heads, head dim 64] in fp32 through the memory-efficient SIMT kernel
    b = TraceBuilder()
    for n in range(4):
        with b.step(n):
            b.op("aten::_efficient_attention_forward",
                 [("fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, "
                   "cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)", 9000.0, (32, 16, 8), (128, 1, 1))],
                 dims=[[8, 2048, 16, 64], [8, 2048, 16, 64], [8, 2048, 16, 64], [], [], [], [], [], [], [], [], []],
                 dtypes=["float", "float", "float"] + [""] * 9)
    report = diagnose(b.write(tmp_path / "t.json.gz"))
    assert "healthy" not in report.ids()
    top = report.findings[0]
    assert top.id == "no-tensor-cores" and top.severity == "high" and "flash or cuDNN" in top.fix
