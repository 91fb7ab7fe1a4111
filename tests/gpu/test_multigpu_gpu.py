"""Multi-GPU (NCCL) on real GPUs: needs 2+ GPUs (run on the device: python3 -m pytest -m gpu tests/gpu/test_multigpu_gpu.py).

The all-reduce sweep under torchrun, `perflab scale` with traces, and the doctor on a freshly
profiled straggler run naming load-imbalance first.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                                                  reason="needs 2 CUDA GPUs")]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "scale_ddp_mlp.py"


def test_allreduce_sweep_reports_nvlink_class_bus_bandwidth(tmp_path):
    from perflab.toolkit.bench.allreduce import run_allreduce_bench

    doc = run_allreduce_bench(2, tmp_path / "ar.json", min_bytes=1 << 20, max_bytes=1 << 28, timeout=120)
    assert doc["world_size"] == 2 and doc["backend"] == "nccl"
    rows = doc["rows"]
    assert [r["bytes"] for r in rows] == [1 << 20, 1 << 22, 1 << 24, 1 << 26, 1 << 28]
    for r in rows:  # n = 2: busbw = algbw * 2(n-1)/n = algbw
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"])
        assert r["algbw_gbps"] == pytest.approx(r["bytes"] / (r["time_us"] * 1e3), rel=1e-6)
    assert rows[-1]["busbw_gbps"] > 50.0          # NVLink, not PCIe host staging
    assert rows[-1]["busbw_gbps"] > rows[0]["busbw_gbps"]  # large messages amortize latency


def test_scale_isolates_communication_on_two_gpus(tmp_path):
    from perflab.toolkit.scaling import run_scaling

    res = run_scaling([str(EXAMPLE), "--hidden", "2048", "--layers", "4", "--batch", "512", "--steps", "12",
                       "--sync-allreduce"], [1, 2], tmp_path, mode="strong", steps=3, warmup=3)
    one, two = res["points"]
    assert one["returncode"] == 0 and two["returncode"] == 0
    assert set(two["per_rank_step_ms"]) == {0, 1}
    assert one["communication"]["comm_ms"] == 0
    assert two["communication"]["comm_ms"] > 0 and two["communication"]["exposed_comm_ms"] > 0
    assert two["communication"]["by_kind"]["all_reduce"]["busbw_gbps"] > 10.0
    assert one["efficiency_pct"] == pytest.approx(100.0)


def test_doctor_names_the_straggler(tmp_path):
    out = tmp_path / "traces"
    cmd = [sys.executable, "-m", "perflab", "profile", "--steps", "4", "--warmup", "4", "--out", str(out), "--",
           sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(EXAMPLE),
           "--hidden", "2048", "--layers", "4", "--batch", "1024", "--steps", "12", "--straggle-ms", "8"]
    subprocess.run(cmd, check=True, timeout=150, capture_output=True)
    from perflab.doctor import diagnose

    rep = diagnose(out)
    assert rep.source["ranks"] == [0, 1]
    assert rep.top.id == "load-imbalance", [(f.id, f.gain_pct) for f in rep.findings]
    assert rep.top.evidence["straggler_rank"] == 1 and rep.top.evidence["waiting_rank"] == 0
    assert rep.top.evidence["wait_ms_per_step"][0] > 4.0
    assert json.dumps(rep.to_dict())
