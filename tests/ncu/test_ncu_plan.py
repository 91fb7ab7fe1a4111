"""From a trace to Nsight Compute's launch count: the function name ncu matches, the skip that lands on one launch
of the recorded steps (steps before the trace x launches per step + launches before it in the trace), the count
when launches of that name differ, and which profiled launch is the chosen one."""
from __future__ import annotations

import pytest

from perflab.analysis.ncu.ncu_plan import function_name, launch_plan, steady_launch, template_key
from perflab.trace import kineto
from perflab.trace.builders import synthetic
from perflab.trace.model import KERNEL

SOFTMAX = "void (anonymous namespace)::softmax_warp_forward<float, float, float, 11, false, false>(float*, float const*, int)"


@pytest.mark.parametrize("name, fn", [
    ("void at::native::(anonymous namespace)::masked_fill_kernel<float>(at::TensorIterator&)", "masked_fill_kernel"),
    ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda"
     "(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda(float)#1}>(at::TensorIteratorBase&, "
     "{lambda(float)#1} const&)::{lambda(int)#1}>(int, {lambda(int)#1})", "elementwise_kernel"),
    ("std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, float, float, false, true, "
     "cublasGemvParamsEx<int, float const> >(cublasGemvParamsEx<int, float const>)", "kernel"),
    ("cutlass::Kernel2<cutlass_80_simt_sgemm_128x128_8x4_nn_align1>(cutlass_80_simt_sgemm_128x128_8x4_nn_align1::Params)",
     "Kernel2"),
    (SOFTMAX, "softmax_warp_forward"),
    ("nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_TNN", "nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_TNN"),
    ("scale_scalar(const float *, float *, unsigned long, float)", "scale_scalar"),   # as ncu names it
])
def test_function_name_is_what_ncu_matches(name, fn):
    assert function_name(name) == fn


def test_template_key_reads_two_demanglers_alike():
    kineto_name = "void at::native::f<4, std::array<char*, 1ul> >(int, std::array<char*, 1ul>)"
    ncu_name = "void at::native::f<4, std::array<char *, 1UL>>(int, T2)"
    assert template_key(kineto_name) == template_key(ncu_name)
    assert template_key(kineto_name) != template_key("void at::native::f<8, std::array<char*, 1ul> >(int)")


def steps_trace(tmp_path, *, first: int = 3, steps: int = 5, extra_in: int | None = None, setup: bool = True):
    """ProfilerStep#first.. : per step a GEMM at two grids, an add and a mul (one function name, two
    instantiations), a softmax; a set-up add before the first step; `extra_in` gets a second softmax."""
    b = synthetic.TraceBuilder()
    if setup:
        b.op("aten::add", [(synthetic.ELEMENTWISE, 5.0, (64, 1, 1), (128, 1, 1))])
    for n in range(first, first + steps):
        with b.step(n):
            b.op("aten::mm", [(synthetic.GEMM, 50.0, (132, 1, 1), (384, 1, 1))])
            b.op("aten::add", [(synthetic.ELEMENTWISE, 5.0, (64, 1, 1), (128, 1, 1))])
            b.op("aten::mul", [(synthetic.MUL, 5.0, (64, 1, 1), (128, 1, 1))])
            b.op("aten::mm", [(synthetic.GEMM, 30.0, (66, 1, 1), (384, 1, 1))])
            for _ in range(2 if n == extra_in else 1):
                b.op("aten::_softmax", [(SOFTMAX, 8.0, (16, 1, 1), (128, 1, 1))])
            b.python(20.0)
    return kineto.load(b.write(tmp_path / "t.json.gz"))


def rows_named(trace, name: str, grid: int | None = None):
    rows = [int(r) for r in (trace.kind == KERNEL).nonzero()[0] if trace.name_of(int(r)) == name]
    return [r for r in rows if grid is None or int(trace.grid[r]) == grid]


def test_a_unique_kernel_is_reached_by_the_steps_before_and_the_launches_before_it(tmp_path):
    trace = steps_trace(tmp_path)
    row = steady_launch(trace, rows_named(trace, SOFTMAX))
    plan = launch_plan(trace, row)
    assert plan.step == 5  # the middle of ProfilerStep#3..#7: the steps before it are a margin for set-up launches
    assert (plan.function, plan.per_step, plan.steps_before, plan.index_in_steps) == ("softmax_warp_forward", 1, 3, 2)
    assert plan.skip == 3 * 1 + 2 and plan.count == 1 and plan.exact and not plan.ambiguous
    assert plan.ncu_options() == ["--kernel", "^softmax_warp_forward$", "--launch-skip", "5", "--launch-count", "1"]
    assert plan.perflab_command(["python", "app.py"]) == ("perflab ncu --kernel '^softmax_warp_forward$' --launch-skip 5 "
                                                          "--launch-count 1 --kill -- python app.py")


def test_instantiations_sharing_a_name_are_counted_together_and_profiled_over_a_step(tmp_path):
    trace = steps_trace(tmp_path)
    mul = steady_launch(trace, rows_named(trace, synthetic.MUL))
    plan = launch_plan(trace, mul)
    # add and mul are both vectorized_elementwise_kernel: 2 per step; the set-up add before step 3 is in the trace
    # but not in a step, so it is not counted (ncu counts it: it lands earlier, within the profiled launches)
    assert plan.function == "vectorized_elementwise_kernel" and plan.per_step == 2
    assert plan.skip == 3 * 2 + (2 * 2 + 1) and plan.count == 2 and plan.ambiguous
    assert any("differ from the chosen one" in n for n in plan.notes)
    assert plan.matches("void at::native::vectorized_elementwise_kernel<4, Mul>(int)", 64, 128)
    assert not plan.matches("void at::native::vectorized_elementwise_kernel<4, Mul>(int)", 65, 128)
    assert not plan.matches("void at::native::other_kernel<4, Mul>(int)", 64, 128)


def test_one_kernel_at_two_grids_is_told_apart_by_its_grid(tmp_path):
    trace = steps_trace(tmp_path)
    small = steady_launch(trace, rows_named(trace, synthetic.GEMM, grid=66))
    plan = launch_plan(trace, small)
    assert plan.grid == 66 and plan.per_step == 2 and plan.count == 2
    assert plan.skip == 3 * 2 + (2 * 2 + 1)


def test_irregular_steps_make_an_estimate_and_say_so(tmp_path):
    trace = steps_trace(tmp_path, extra_in=4)
    plan = launch_plan(trace, steady_launch(trace, rows_named(trace, SOFTMAX)))
    assert not plan.exact and plan.per_step == pytest.approx(1.2)
    assert plan.skip == round(3 * 1.2) + 3
    assert any("estimated at 1.2 launches per step" in n for n in plan.notes)


def test_a_trace_from_the_first_step_skips_only_what_it_holds(tmp_path):
    trace = steps_trace(tmp_path, first=0, setup=False)
    plan = launch_plan(trace, steady_launch(trace, rows_named(trace, SOFTMAX)))
    assert plan.steps_before == 0 and plan.step == 2 and plan.skip == 2


def test_a_kernel_launched_before_the_trace_counts_with_the_steps_before(tmp_path):
    """The GPU runs behind the host: the last warm-up step's kernel can still run when recording starts. Its launch
    call is not in the trace; it is one of the launches the steps before the trace make, not one of step #3's."""
    b = synthetic.TraceBuilder()
    for n in range(3, 8):
        with b.step(n):
            b.op("aten::_softmax", [(SOFTMAX, 8.0, (16, 1, 1), (128, 1, 1))])
            b.python(20.0)
    doc = b.to_dict()
    first_step = next(e for e in doc["traceEvents"] if e.get("name") == "ProfilerStep#3")
    late = dict(next(e for e in doc["traceEvents"] if e.get("cat") == "kernel"))
    late["ts"], late["args"] = first_step["ts"] + 0.5, {**late["args"], "correlation": 999_999, "External id": 999_999}
    doc["traceEvents"].append(late)
    trace = kineto.load(synthetic.write_document(tmp_path / "t.json.gz", doc))
    rows = rows_named(trace, SOFTMAX)
    assert len(rows) == 6
    plan = launch_plan(trace, steady_launch(trace, rows))
    assert plan.exact and plan.per_step == 1 and plan.step == 5 and plan.skip == 3 + 2
