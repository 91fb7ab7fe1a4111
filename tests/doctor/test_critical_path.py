"""Issue 27: the step's critical path on traces with several streams (analysis/idle/critical_path.py)."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from perflab.analysis.idle.critical_path import critical_path
from perflab.trace.kineto import load

PEER = Path(__file__).parents[3] / "shared" / "peer-traces" / "hta"


def _trace(tmp_path, events):
    path = tmp_path / "t.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    return load(path)


def _ev(cat, name, ts, dur, tid, **args):
    pid = 0 if cat == "kernel" else 1
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _two_streams(tmp_path, long_on_side: bool = False):
    """Host launches a long kernel on stream 7 and a short one on stream 8 that runs wholly under it, then
    synchronizes the device."""
    a_us, b_us = (200.0, 1000.0) if long_on_side else (1000.0, 200.0)
    return _trace(tmp_path, [
        _ev("cuda_runtime", "cudaLaunchKernel", 1000.0, 5.0, 1, correlation=1),
        _ev("cuda_runtime", "cudaLaunchKernel", 1010.0, 5.0, 1, correlation=2),
        _ev("kernel", "long_a", 1010.0, a_us, 7, stream=7, device=0, correlation=1),
        _ev("kernel", "short_b", 1100.0, b_us, 8, stream=8, device=0, correlation=2),
        _ev("cuda_runtime", "cudaDeviceSynchronize", 1020.0, 1200.0, 1),
    ])


def _rows(t, name):
    return [int(r) for r in np.flatnonzero(t.kind == 4) if t.names[t.name[r]] == name]


def test_a_kernel_wholly_overlapped_by_another_stream_saves_nothing(tmp_path):
    t = _two_streams(tmp_path)
    cp = critical_path(t)
    assert cp.saving_us(_rows(t, "short_b"), t) == 0.0
    assert cp.saving_us(_rows(t, "long_a"), t) == pytest.approx(1000.0)
    assert cp.by_lane["stream 7"] == pytest.approx(1000.0)
    assert "stream 8" not in cp.by_lane


def test_the_chain_follows_whichever_stream_ends_last(tmp_path):
    t = _two_streams(tmp_path, long_on_side=True)
    cp = critical_path(t)
    assert cp.saving_us(_rows(t, "long_a"), t) == 0.0
    assert cp.saving_us(_rows(t, "short_b"), t) == pytest.approx(1000.0)
    assert cp.to_dict()["by_lane_us"]["stream 8"] == pytest.approx(1000.0)


def test_a_chain_that_comes_back_to_an_event_takes_the_next_latest_predecessor(tmp_path):
    """A blocking copy whose call ends just after its copy: the call waited for the copy and the copy for the
    call (within EPS_US), a loop; the walk leaves the copy by its other predecessor, the kernel before it on the
    stream, and from there goes on to that kernel's launch."""
    t = _trace(tmp_path, [
        _ev("cuda_runtime", "cudaLaunchKernel", 90.0, 5.0, 1, correlation=1),
        _ev("kernel", "k", 96.0, 3.0, 7, stream=7, device=0, correlation=1),
        _ev("cuda_runtime", "cudaMemcpy", 100.0, 0.2, 1, correlation=2),
        {**_ev("gpu_memcpy", "Memcpy DtoH", 100.1, 0.05, 7, stream=7, device=0, correlation=2), "pid": 0},
    ])
    cp = critical_path(t)
    assert [t.names[t.name[r]] for r in cp.rows] == ["cudaLaunchKernel", "k", "Memcpy DtoH", "cudaMemcpy"]
    assert cp.by_lane["stream 7"] == pytest.approx(3.05) and cp.by_lane["thread 1"] == pytest.approx(5.05)
    assert cp.waiting_us == pytest.approx(1.0 + 1.1)   # launch end to kernel, kernel end to the copy


@pytest.mark.skipif(not PEER.is_dir(), reason="HTA's sample traces are not here")
def test_hta_event_sync_sample_ends_on_the_kernel_the_device_sync_waits_for():
    t = load(PEER / "critical_path__cuda_event_sync_multi_stream__event_sync_trace.json.gz")
    cp = critical_path(t)
    names = [t.names[t.name[r]] for r in cp.rows]
    assert names[-1] == "cudaDeviceSynchronize" and "sgemm" in names[-2]
    assert any(k.startswith("stream") for k in cp.by_lane)


# --- the doctor: kernel gains on the critical path (doctor/on_path.py) ---

def _gemm_trace(tmp_path, side_us: float | None, gemm_on_side: bool = False):
    """An FP32 SIMT GEMM (1000 us) on stream 7 and, when side_us is given, another kernel on stream 8 launched
    beside it; the host then synchronizes the device. gemm_on_side: the GEMM is the short kernel on stream 8 and
    the other one (side_us) runs on stream 7."""
    gemm, other = ("ampere_sgemm_128x64_nn", "other_kernel")
    events = [_ev("cuda_runtime", "cudaLaunchKernel", 1000.0, 5.0, 1, correlation=1),
              _ev("cuda_runtime", "cudaDeviceSynchronize", 1020.0, 1200.0, 1)]
    if side_us is None:
        events.append(_ev("kernel", gemm, 1010.0, 1000.0, 7, stream=7, device=0, correlation=1))
        return _trace(tmp_path, events)
    events.append(_ev("cuda_runtime", "cudaLaunchKernel", 1008.0, 5.0, 1, correlation=2))
    if gemm_on_side:
        events += [_ev("kernel", other, 1010.0, 1000.0, 7, stream=7, device=0, correlation=1),
                   _ev("kernel", gemm, 1015.0, side_us, 8, stream=8, device=0, correlation=2)]
    else:
        events += [_ev("kernel", gemm, 1010.0, 1000.0, 7, stream=7, device=0, correlation=1),
                   _ev("kernel", other, 1015.0, side_us, 8, stream=8, device=0, correlation=2)]
    return _trace(tmp_path, events)


def _tensor_core_gain(t):
    from perflab.doctor.context import Context
    from perflab.doctor.rules.trace_kernel import TENSOR_CORE_SAVING, no_tensor_cores

    ctx = Context.build(t)
    found = no_tensor_cores(ctx)
    simt_us = sum(float(t.dur[r]) for r in _rows(t, "ampere_sgemm_128x64_nn"))
    return ctx, (found[0] if found else None), TENSOR_CORE_SAVING * ctx.share(simt_us)


def test_single_stream_gain_is_the_kernel_share_as_before(tmp_path):
    ctx, f, share_gain = _tensor_core_gain(_gemm_trace(tmp_path, None))
    assert not ctx.streams_overlap
    assert f is not None and f.gain_pct == pytest.approx(round(share_gain, 1))
    assert "on_critical_path_pct" not in f.evidence


def test_a_gemm_hidden_behind_another_stream_has_no_gain(tmp_path):
    ctx, f, share_gain = _tensor_core_gain(_gemm_trace(tmp_path, 300.0, gemm_on_side=True))
    assert ctx.streams_overlap and share_gain >= 3.0   # as a share of the step it would be reported
    assert f is None                                    # on the critical path it saves nothing


def test_a_partly_overlapped_gemm_gains_its_exposed_part(tmp_path):
    from perflab.doctor.on_path import critical_saving

    t = _gemm_trace(tmp_path, 400.0)
    ctx, f, share_gain = _tensor_core_gain(t)
    gemm = _rows(t, "ampere_sgemm_128x64_nn")
    exposed = 1000.0 - 400.0                            # the other stream runs beside it for 400 us
    saved, evidence = critical_saving(ctx, gemm, 750.0)
    assert saved == pytest.approx(exposed)              # the fix would take 750 us; only 600 are exposed
    assert f.gain_pct == pytest.approx(round(ctx.share(exposed), 1)) and f.gain_pct < share_gain
    assert f.evidence["on_critical_path_pct"] == pytest.approx(60.0)
    assert f.evidence["critical_path_set_by"] == "stream 7"
    # a fix that takes less than the exposed part keeps all of it
    assert critical_saving(ctx, gemm, 100.0)[0] == pytest.approx(100.0)


def test_the_report_names_the_chain_that_sets_the_step(tmp_path):
    from perflab.doctor import critical_path_summary
    from perflab.doctor.context import Context

    cp = critical_path_summary(Context.build(_gemm_trace(tmp_path, 400.0)))
    assert cp["streams_overlap"] and cp["sets_the_step"] == "stream 7" and "stream 7" in cp["note"]
    assert cp["by_category_pct"]["kernel"] > 50


def test_kernels_launched_in_a_window_count_even_when_they_end_after_it(tmp_path):
    t = _two_streams(tmp_path)
    cp = critical_path(t, 990.0, 1015.0)    # the launches fall in the window, the kernels end long after
    assert cp.saving_us(_rows(t, "long_a"), t) == pytest.approx(1000.0)
    assert critical_path(t, 1500.0, 1600.0).rows == [] or not critical_path(t, 1500.0, 1600.0).gpu_rows
