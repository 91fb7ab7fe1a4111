"""Elementwise chains stop at profiler-step boundaries: one fused kernel per step is not a chain."""
from __future__ import annotations

from perflab.analysis.work.kernel_patterns import elementwise_chains
from perflab.analysis.steps.windows import analysis_windows
from perflab.doctor import diagnose
from perflab.trace.builders import synthetic
from perflab.trace.kineto import load

FUSED = "triton_poi_fused_add_mul_tanh_0"


def one_kernel_steps(tmp_path, per_step: int, steps: int = 6):
    """`steps` steps back to back, each launching `per_step` same-shape elementwise kernels."""
    b = synthetic.TraceBuilder()
    for n in range(steps):
        with b.step(n):
            for _ in range(per_step):
                b.op("aten::add", [(FUSED if per_step == 1 else synthetic.ELEMENTWISE, 250.0, (131072, 1, 1),
                                    (256, 1, 1))], cpu_us=20.0)
    b.synchronize()
    return load(b.write(tmp_path / "t.json.gz"))


def test_a_fused_kernel_repeated_step_after_step_is_no_chain(tmp_path):
    trace = one_kernel_steps(tmp_path, per_step=1)
    chains = elementwise_chains(trace, analysis_windows(trace, None))
    assert chains["chain_count"] == 0 and chains["kernels"] == 0
    assert "unfused-elementwise" not in [f.id for f in diagnose(trace).findings]


def test_chains_inside_steps_are_found_once_per_step(tmp_path):
    trace = one_kernel_steps(tmp_path, per_step=4, steps=5)
    chains = elementwise_chains(trace, analysis_windows(trace, None))
    assert chains["chain_count"] == 5 and chains["mean_length"] == 4.0   # not one chain of 20
    top = diagnose(trace).findings[0]
    assert top.id == "unfused-elementwise" and top.evidence["mean_chain_length"] == 4.0
