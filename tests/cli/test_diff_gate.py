"""perflab diff BEFORE AFTER --gate PCT: fails CI only on a slowdown beyond PCT that noise cannot explain, and
refuses profiles that cannot be compared (GPU, driver, clocks, shapes, step count), saying why."""
from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import cli_run
from perflab.analysis.reports.regression_gate import median_change_ci
from perflab.trace.builders import synthetic

GEMM = synthetic.GEMM


def _trace(path, *, host_ms: list[float], device: str = synthetic.H100, dims=((512, 1024), (1024, 1024)),
           driver: int = 13000):
    b = synthetic.TraceBuilder(device_name=device)
    for n, ms in enumerate(host_ms):
        with b.step(n):
            b.host("aten::cat", ms * 1000)
            for _ in range(4):
                b.op("aten::mm", [(GEMM, 200.0, (132, 1, 1), (384, 1, 1))], cpu_us=12.0, dims=[list(d) for d in dims])
            b.synchronize()
    doc = b.to_dict()
    doc["cuda_driver_version"] = driver
    return synthetic.write_document(path, doc)


def _steps(base: float, n: int = 12, noise: float = 0.02, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    return [float(v) for v in base * (1 + noise * rng.standard_normal(n))]


def test_the_interval_brackets_a_known_change_and_holds_zero_for_none():
    rng = np.random.default_rng(1)
    before = 10 * (1 + 0.02 * rng.standard_normal(40))
    change, low, high = median_change_ci(before, before * 1.2)
    assert low < change < high and 17 < low and high < 23
    change, low, high = median_change_ci(before, 10 * (1 + 0.02 * rng.standard_normal(40)))
    assert low < 0 < high


def test_a_real_slowdown_beyond_the_gate_fails(capsys, tmp_path):
    before = _trace(tmp_path / "b.json", host_ms=_steps(8.0))
    after = _trace(tmp_path / "a.json", host_ms=_steps(12.0, seed=1))
    rc, out, _ = cli_run(capsys, "diff", before, after, "--gate", "10")
    assert rc == 1 and "gate 10 %: regression: step time +" in " ".join(out.split())
    rc, out, _ = cli_run(capsys, "diff", before, after, "--gate", "10", "--json")
    g = json.loads(out)["gate"]
    assert rc == 1 and g["failed"] and g["ci_low_pct"] > 10 and g["steps"] == [12, 12]
    rc, out, _ = cli_run(capsys, "diff", before, after, "--gate", "60", "--json")  # slower, but not by 60 %
    assert rc == 0 and not json.loads(out)["gate"]["failed"]


def test_noise_passes_and_says_so(capsys, tmp_path):
    before = _trace(tmp_path / "b.json", host_ms=_steps(8.0, noise=0.05))
    after = _trace(tmp_path / "a.json", host_ms=_steps(8.0, noise=0.05, seed=3))
    rc, out, _ = cli_run(capsys, "diff", before, after, "--gate", "1", "--json")
    g = json.loads(out)["gate"]
    assert rc == 0 and g["ci_low_pct"] <= 0 <= g["ci_high_pct"] and "within noise" in g["verdict"]


@pytest.mark.parametrize("change, why", [
    ({"device": "NVIDIA A100-SXM4-80GB"}, "different GPU: NVIDIA H100 80GB HBM3 vs NVIDIA A100-SXM4-80GB"),
    ({"driver": 12040}, "different CUDA driver: 13000 vs 12040"),
    ({"dims": ((2048, 1024), (1024, 1024))}, "different matmul shapes"),
    ({"host_ms": [8.0, 8.1, 7.9]}, "AFTER has 3 step(s); a confidence interval needs at least 5"),
])
def test_profiles_that_cannot_be_compared_are_refused_with_the_reason(capsys, tmp_path, change, why):
    before = _trace(tmp_path / "b.json", host_ms=_steps(8.0))
    after = _trace(tmp_path / "a.json", **{"host_ms": _steps(8.0, seed=2), **change})
    rc, out, err = cli_run(capsys, "diff", before, after, "--gate", "5")
    assert rc == 2 and not out and err.count("\n") == 1 and "not comparable for --gate" in err and why in err, err
    assert cli_run(capsys, "diff", before, after)[0] == 0  # without the gate, the diff still compares (with notes)
