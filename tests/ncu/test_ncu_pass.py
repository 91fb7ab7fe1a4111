"""Several chosen launches in one Nsight Compute run: one filter over their function names, one launch window that
holds a launch like each chosen one (same kernel, grid, block), as small as it can be, its skip counted as ncu
counts (the launches matching the filter, from process start)."""
from __future__ import annotations

import numpy as np

from perflab.analysis.ncu.ncu_pass import filter_regex, one_pass_plans
from perflab.analysis.ncu.ncu_plan import function_name, function_rows, launch_plan, steady_launch
from perflab.trace.builders import synthetic
from test_ncu_plan import SOFTMAX, rows_named, steps_trace


def same_launch(trace, a: int, b: int) -> bool:
    return (trace.name[a], trace.grid[a], trace.block[a]) == (trace.name[b], trace.grid[b], trace.block[b])


def test_one_kernel_gets_exactly_the_launch_and_count_of_its_own_plan(tmp_path):
    trace = steps_trace(tmp_path)
    for row in (steady_launch(trace, rows_named(trace, SOFTMAX)), steady_launch(trace, rows_named(trace, synthetic.MUL))):
        (p,) = one_pass_plans(trace, [row])
        own = launch_plan(trace, row)
        assert (p.regex, p.skip, p.count, p.step) == (own.regex, own.skip, own.count, own.step)
        assert p.members[0].row == row and p.members[0].position == 0


def test_two_kernels_share_one_window_that_holds_a_launch_like_each(tmp_path):
    trace = steps_trace(tmp_path)
    softmax = steady_launch(trace, rows_named(trace, SOFTMAX))
    gemm = steady_launch(trace, rows_named(trace, synthetic.GEMM, grid=132))
    (p,) = one_pass_plans(trace, [softmax, gemm])
    fns = sorted({function_name(synthetic.GEMM), "softmax_warp_forward"})
    assert p.regex == filter_regex(fns) == f"^({fns[0]}|{fns[1]})$"
    # per step the filter matches GEMM(132), GEMM(66), softmax: the smallest window is a softmax and the next step's
    # first GEMM, two launches; the one nearest the chosen launches (both in step #5) is step #4's softmax + #5's GEMM;
    # the GEMM runs at two grids, so a step's worth (3) is profiled (see the next tests)
    assert p.step == 4 and p.count == 3
    by_fn = {m.function: m for m in p.members}
    assert by_fn["softmax_warp_forward"].position == 0 and by_fn[function_name(synthetic.GEMM)].position == 1
    assert all(same_launch(trace, m.row, m.target_row) for m in p.members)
    # the skip counts what ncu counts: 3 steps before the trace x 3 matching launches, then the recorded ones before
    launches = function_rows(trace, set(fns))
    first = int(np.flatnonzero(launches == by_fn["softmax_warp_forward"].row)[0])
    assert p.skip == 3 * 3 + first and p.exact
    # the launch at position i of the window is the (skip + i)-th matching launch of the program
    for m in p.members:
        assert int(launches[first + m.position]) == m.row


def test_kernels_too_far_apart_for_one_window_get_a_run_each(tmp_path):
    trace = steps_trace(tmp_path)
    softmax = steady_launch(trace, rows_named(trace, SOFTMAX))
    gemm = steady_launch(trace, rows_named(trace, synthetic.GEMM, grid=132))
    passes = one_pass_plans(trace, [softmax, gemm], max_window=1)
    assert [[m.target_row for m in p.members] for p in passes] == [[softmax], [gemm]]
    assert [p.count for p in passes] == [1, 2]   # the GEMM's own plan: two grids per step, a step's worth


def test_a_kernel_whose_name_stands_for_other_launches_widens_the_window(tmp_path):
    """add and mul are both vectorized_elementwise_kernel: as in its own plan, a step's worth of them is profiled
    so that a count moved by set-up launches still meets the chosen one."""
    trace = steps_trace(tmp_path)
    softmax = steady_launch(trace, rows_named(trace, SOFTMAX))
    mul = steady_launch(trace, rows_named(trace, synthetic.MUL))
    (p,) = one_pass_plans(trace, [softmax, mul])
    assert max(m.position for m in p.members) + 1 == 2      # mul, then softmax
    assert p.count == 3 and any("differ from it" in n for n in p.notes)   # add, mul, softmax: a step's worth
