"""Kernels worth an ncu run are ranked by the time they would save at their speed of light, not by their time."""
from __future__ import annotations

from pathlib import Path

import pytest

from perflab.analysis.work.kernel_targets import SOL, TIME, choose, kernel_targets
from perflab.doctor.context import Context
from perflab.trace import kineto
from perflab.trace.builders import synthetic

DATA = Path(__file__).resolve().parents[1] / "data" / "kineto"


def targets_of(trace):
    ctx = Context.build(trace)
    return kernel_targets(trace, ctx.windows, ctx.op_work, ctx.ceilings, steps=ctx.n_steps, step_us=ctx.step_ms * 1e3)


def test_the_kernel_furthest_from_its_roof_ranks_above_a_longer_one_near_it():
    # attention written out by hand on an H100: the masked_fill kernel runs at a third of its roof; the copy kernel
    # takes longer but runs nearer its roof, so it has less to give
    ts = targets_of(kineto.load(DATA / "h100_sol_attention_by_hand.trace.json.gz"))
    by_fn = {t.function: t for t in ts}
    fill, copy = by_fn["elementwise_kernel"], by_fn["unrolled_elementwise_kernel"]
    assert copy.time_us > fill.time_us and fill.gain_us > copy.gain_us
    assert ts[0] is fill and fill.basis == SOL
    # a few of its launches ran outside any recorded op: their time counts, their gap is not guessed
    assert fill.priced_us < fill.time_us
    assert fill.gain_us == pytest.approx(fill.priced_us - fill.sol_us, rel=1e-6)
    assert fill.pct_of_roof == pytest.approx(100 * fill.sol_us / fill.priced_us)
    assert all(a.gain_us >= b.gain_us for a, b in zip(ts, ts[1:]))
    assert "masked_fill" in fill.kernel and fill.ops[0]["op"] == "aten::masked_fill_"


def test_a_kernel_no_op_prices_ranks_by_its_whole_time_and_says_so(tmp_path):
    b = synthetic.TraceBuilder()
    for n in range(3, 6):
        with b.step(n):
            b.op("aten::add", [(synthetic.ELEMENTWISE, 40.0)], dims=[[1 << 20], [1 << 20], []],
                 dtypes=["c10::BFloat16", "c10::BFloat16", "Scalar"])
            b.graph_replay([("my_custom_kernel", 400.0)])    # replayed from a graph: no op to price it
            b.python(100.0)
    ts = targets_of(kineto.load(b.write(tmp_path / "t.json.gz")))
    assert ts[0].function == "my_custom_kernel" and ts[0].basis == TIME and ts[0].sol_us is None
    assert ts[0].gain_us == pytest.approx(400.0, rel=1e-3)
    add = next(t for t in ts if t.function == "vectorized_elementwise_kernel")
    assert add.basis == SOL and add.gain_us < add.time_us


def test_choose_keeps_those_worth_a_run_and_says_why():
    ts = targets_of(kineto.load(DATA / "h100_sol_attention_by_hand.trace.json.gz"))
    chosen, why = choose(ts, 2, 3.0)
    assert [t.function for t in chosen] == [t.function for t in ts[:2]]
    assert why.startswith("2 kernel(s) would each save 3 % of the step or more; 1 more would")
    assert choose(ts, 3, 50.0)[0] == []
    assert "no kernel would save 50 % of the step or more: the most, elementwise_kernel" in choose(ts, 3, 50.0)[1]
    assert choose([], 3, 3.0) == ([], "no kernel was recorded in the analysed steps")
