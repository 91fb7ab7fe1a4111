"""timer(): statistics over a fake clock, and the choice of clock."""
import statistics
import sys

import numpy as np
import pytest

from perflab.errors import PerflabError
from perflab.toolkit import timing
from perflab.toolkit.timing import Timing, timer


def test_fake_clock_samples_and_statistics(monkeypatch):
    durations_ms = [5.0, 1.0, 2.0, 3.0, 4.0, 10.0, 2.5]
    ticks = iter(np.cumsum([0.0] + [d for d in durations_ms for d in (d / 1e3, 0.0)]))
    monkeypatch.setattr(timing, "perf_counter", lambda: float(next(ticks)))
    calls = []
    t = timer(lambda x, k=0: calls.append((x, k)), 7, k=1, warmup=3, repeats=len(durations_ms), cuda=False)
    assert calls == [(7, 1)] * 10  # warm-up calls are made but not timed
    assert t.method == "perf_counter" and t.n == 7
    assert t.samples_ms == pytest.approx(durations_ms)
    assert t.median == pytest.approx(3.0)
    assert t.mean == pytest.approx(statistics.mean(durations_ms))
    assert t.stdev == pytest.approx(statistics.stdev(durations_ms))
    assert (t.min, t.max) == (pytest.approx(1.0), pytest.approx(10.0))
    assert t.p10 == pytest.approx(np.percentile(durations_ms, 10))
    assert t.p90 == pytest.approx(np.percentile(durations_ms, 90))
    d = t.to_dict()
    assert d["median_ms"] == pytest.approx(3.0) and d["samples_ms"] == pytest.approx(durations_ms)
    assert "median 3 ms" in str(t)


def test_single_sample_has_zero_stdev():
    assert Timing((2.0,), "perf_counter").stdev == 0.0


def test_real_cpu_timing_is_positive():
    t = timer(sum, range(1000), warmup=1, repeats=5)
    assert t.method == "perf_counter" and t.n == 5 and t.min > 0


def test_bad_arguments():
    with pytest.raises(PerflabError):
        timer(lambda: None, repeats=0)


def test_clock_choice_without_cuda():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("checks the CPU machine's choice")
    assert timing.uses_cuda((torch.zeros(2), [torch.nn.Linear(2, 2)]), {}) is False
    assert timer(torch.zeros, 4, repeats=3).method == "perf_counter"
    with pytest.raises(PerflabError, match="needs a CUDA GPU"):
        timer(lambda: None, repeats=2, cuda=True)


def test_pure_python_function_does_not_need_torch(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert timing.uses_cuda((1, 2), {}) is False
