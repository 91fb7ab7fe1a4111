"""Why the GPU is idle: each scenario's idle time lands in the right cause."""
from __future__ import annotations

import pytest

from perflab.analysis.idle.gaps import analyze_gaps
from perflab.analysis.steps.windows import analysis_windows
from perflab.trace import kineto
from perflab.trace.builders import synthetic


def gaps_of(tmp_path, builder):
    trace = kineto.load(builder.write(tmp_path / "t.json"))
    return analyze_gaps(trace, analysis_windows(trace))


def dominant(g):
    return max(g.by_cause, key=g.by_cause.get)


@pytest.mark.parametrize("scenario, cause", [
    (lambda: synthetic.launch_bound(steps=2, ops=150), "launch"),
    (lambda: synthetic.decode_with_item(steps=1, tokens=8), "sync"),
    (lambda: synthetic.host_bound(steps=2), "host"),
    (lambda: synthetic.input_bound(steps=2), "input"),
])
def test_dominant_cause(tmp_path, scenario, cause):
    g = gaps_of(tmp_path, scenario())
    assert dominant(g) == cause, g.to_dict()
    assert abs(sum(g.by_cause.values()) - g.idle_us) < 1e-6 * max(g.idle_us, 1)


def test_sync_cost_is_the_overlap_the_wait_prevented(tmp_path):
    slow = gaps_of(tmp_path, synthetic.decode_with_item(steps=1, tokens=8))
    # per token the host waits ~0.4 ms and then works 0.4 ms: about that much could overlap
    assert 0.25 < slow.by_cause["sync"] / slow.window_us < 0.45
    fixed = gaps_of(tmp_path, synthetic.decode_with_item(steps=1, tokens=8, item=False))
    assert fixed.by_cause["sync"] == 0 and fixed.sync["draining_syncs"] == 0


def test_final_sync_outside_the_steps_is_ignored(tmp_path):
    g = gaps_of(tmp_path, synthetic.gpu_bound(steps=3, layers=10))
    assert g.idle_us / g.window_us < 0.02 and g.by_cause["sync"] == 0


def test_pageable_copy_idle_is_attributed_to_the_copy(tmp_path):
    b = synthetic.TraceBuilder()
    for n in range(3):
        with b.step(n):
            b.op("aten::mm", [(synthetic.GEMM, 3000.0)])
            b.copy(64_000_000, pageable=True)  # the sync after it waits on the copy, not on compute
            b.host("aten::zeros", 50.0)
    g = gaps_of(tmp_path, b)
    assert g.by_cause["copy"] > g.by_cause["sync"]
    assert g.copy_idle["pageable"] > 0 and g.copy_idle["h2d"] > 0


def test_examples_name_the_blocking_call(tmp_path):
    g = gaps_of(tmp_path, synthetic.decode_with_item(steps=1, tokens=4))
    assert g.examples["sync"] and "in aten::item" in g.examples["sync"][0]["name"]


def test_queued_work_that_does_not_start_is_other(tmp_path):
    b = synthetic.TraceBuilder()
    for n in range(2):
        with b.step(n):
            b.op("aten::mm", [(synthetic.GEMM, 100.0)])
            b.free_at[7] = b.now + 2000.0  # the stream waits on an event from elsewhere (another rank)
            b.op("aten::mm", [(synthetic.GEMM, 100.0)])
            b.synchronize()
    g = gaps_of(tmp_path, b)
    assert dominant(g) == "other" and g.by_cause["other"] / g.window_us > 0.8
