"""no-overlap claims only copy time that compute with no data dependency on the copy could hide."""
from __future__ import annotations

from perflab.doctor import diagnose
from perflab.trace.builders import synthetic

X = [4096, 4096]


def _rep(tmp_path, b):
    return diagnose(b.write(tmp_path / "t.json.gz"))


def _find(rep, fid):
    return next((f for f in rep.findings if f.id == fid), None)


def micro_batches(steps=3, k=6):
    """Copy in x_i, compute on it, copy y_i out, all non_blocking; the host waits once per step."""
    b = synthetic.TraceBuilder()
    for n in range(steps):
        with b.step(n):
            for _ in range(k):
                b.copy(32 << 20, pageable=False, non_blocking=True, gbps=24.0, dims=[X])
                b.op("aten::mm", [(synthetic.GEMM, 1200.0)], dims=[X, X])
                b.op("aten::mm", [(synthetic.GEMM, 1200.0)], dims=[X, X])
                b.copy(32 << 20, direction="d2h", pageable=False, non_blocking=True, gbps=24.0, dims=[X])
            b.synchronize()
    return b


def feeds_the_gemm(steps=3, sync=True):
    """Each step: copy x in, the GEMM reads it, the result goes back blocking: nothing else to overlap."""
    b = synthetic.TraceBuilder()
    for n in range(steps):
        with b.step(n):
            b.copy(32 << 20, pageable=False, non_blocking=True, gbps=24.0, dims=[X])
            b.op("aten::mm", [(synthetic.GEMM, 2400.0)], dims=[X, X])
            b.copy(32 << 20, direction="d2h", pageable=False, non_blocking=False, gbps=24.0, dims=[X])
    return b


def test_copies_beside_independent_micro_batches_are_no_overlap(tmp_path):
    rep = _rep(tmp_path, micro_batches())
    f = _find(rep, "no-overlap")
    assert f is not None and f.severity in ("high", "medium"), [(g.id, g.gain_pct) for g in rep.findings]
    # the first copy in of each step follows the host's wait, the last copy out precedes it: not provable
    assert 0 < f.evidence["undecided_copy_pct"] < f.evidence["independent_copy_pct"]
    assert abs(f.gain_pct - f.evidence["hideable_copy_pct"]) < 0.1
    assert f.evidence["hideable_copy_pct"] <= f.evidence["independent_copy_pct"]


def test_copies_that_feed_the_gemm_and_read_it_back_are_not_no_overlap(tmp_path):
    """The one step: the copy in feeds the only GEMM, the copy out reads what it wrote and the host waits."""
    rep = _rep(tmp_path, feeds_the_gemm(steps=1))
    assert _find(rep, "no-overlap") is None, [(g.id, g.gain_pct, g.summary) for g in rep.findings]
    assert {"h2d-copy", "d2h-copy", "memcpy"} & {f.id for f in rep.findings}


def test_copies_after_a_host_wait_are_undecided_and_claimed_low(tmp_path):
    """Across steps the copy in could move under the last GEMM only if its data does not come from it."""
    rep = _rep(tmp_path, feeds_the_gemm(steps=4))
    f = _find(rep, "no-overlap")
    assert f is not None and f.severity == "low", [(g.id, g.gain_pct) for g in rep.findings]
    assert f.evidence["independent_copy_pct"] == 0 and f.evidence["undecided_copy_pct"] > 10
    assert f.evidence["up_to_pct"] > f.gain_pct and "cannot tell" in f.summary


def test_a_copy_whose_consumer_comes_later_can_overlap_the_ops_between(tmp_path):
    b = synthetic.TraceBuilder()
    for n in range(3):
        with b.step(n):
            b.copy(16 << 20, pageable=False, non_blocking=True, gbps=24.0, dims=[[2048, 4096]])
            for _ in range(4):   # compute on other tensors first
                b.op("aten::mm", [(synthetic.GEMM, 400.0)], dims=[X, X])
            b.op("aten::mm", [(synthetic.GEMM, 400.0)], dims=[[2048, 4096], X])   # the consumer
            b.synchronize()
    f = _find(_rep(tmp_path, b), "no-overlap")
    assert f is not None and f.evidence["independent_copy_pct"] > 5 and f.evidence["copy_consumers_found"] == "3 of 3"


def test_without_recorded_shapes_the_next_op_may_be_the_consumer(tmp_path):
    b = synthetic.TraceBuilder()
    for n in range(3):
        with b.step(n):
            b.copy(16 << 20, pageable=False, non_blocking=True, gbps=24.0)
            for _ in range(5):
                b.op("aten::mm", [(synthetic.GEMM, 400.0)])
            b.synchronize()
    f = _find(_rep(tmp_path, b), "no-overlap")
    assert f is None or (f.evidence["independent_copy_pct"] == 0 and f.severity == "low")
