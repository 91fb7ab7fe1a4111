"""The toolkit on a real GPU (run on the device: python3 -m pytest -m gpu tests/gpu/test_toolkit_gpu.py).

GPUMonitor against the card's own limits and energy counter, energy(), timer() against
triton's do_bench, and `perflab profile` on the example.
"""
import gzip
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

from perflab import GPUMonitor, energy, timer  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tiny_gpt_inference.py"
N = 8192


@pytest.fixture(scope="module")
def operands():
    a = torch.randn(N, N, device="cuda", dtype=torch.bfloat16)
    return a, torch.randn(N, N, device="cuda", dtype=torch.bfloat16)


def busy(a, b, seconds):
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(20):
            a @ b
        torch.cuda.synchronize()


def power_limit_w():
    import pynvml

    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        return pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000
    finally:
        pynvml.nvmlShutdown()


def test_monitor_power_within_limit_and_energy_counter_matches_integral(operands, tmp_path):
    limit = power_limit_w()
    with GPUMonitor(interval=0.01) as mon:
        busy(*operands, 4.0)
    s = mon.summary()
    print(json.dumps(s, indent=1))
    assert s["samples"] > 200  # ~400 expected at 10 ms over 4 s
    assert s["power_source"] == "instant"
    assert 50 < s["mean_power_w"] <= limit * 1.02
    # The limit is enforced on a running average; H100 instantaneous readings overshoot it by 20 % and
    # more for milliseconds (856 W against 700 W measured 2026-11-23), so only a wild value fails here.
    assert s["max_power_w"] <= limit * 1.5
    assert s["energy_j_counter"] == pytest.approx(s["energy_j_integrated"], rel=0.10)
    assert s["mean_gpu_util_pct"] > 80 and s["peak_mem_used_mib"] > 2 * N * N * 2 / 2**20
    assert s["min_sm_clock_mhz"] > 0
    mon.to_json(tmp_path / "m.json")
    mon.plot(tmp_path / "m.png")


def test_energy_per_matmul_is_plausible(operands):
    a, b = operands
    limit = power_limit_w()
    r = energy(torch.matmul, a, b, min_time_s=2.0)
    print(r)
    assert r.flops_per_call == 2 * N**3  # counted by FlopCounterMode
    assert r.joules_per_call > 0 and 50 < r.mean_power_w <= limit * 1.05
    # a dense bf16 GEMM on an H100 lands around 1 TFLOP/J; anything between 10 GFLOP/J and 3 TFLOP/J is sane
    assert 1e10 < r.flop_per_joule < 3e12


def test_timer_matches_do_bench(operands):
    triton_testing = pytest.importorskip("triton.testing")
    a, b = operands
    ours = timer(torch.matmul, a, b, warmup=10, repeats=100)
    assert ours.method == "cuda-events"
    theirs = triton_testing.do_bench(lambda: torch.matmul(a, b), warmup=100, rep=500, return_mode="median")
    print(ours, "do_bench median", theirs)
    assert ours.median == pytest.approx(theirs, rel=0.10)


def test_profile_the_example_writes_a_trace_and_a_verdict(tmp_path):
    out = tmp_path / "prof"
    html = tmp_path / "report.html"
    proc = subprocess.run([sys.executable, "-m", "perflab", "profile", "--out", str(out), "--html", str(html), "--",
                           sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=300)
    print(proc.stdout, proc.stderr[-3000:])
    assert proc.returncode == 0
    doc = json.load(gzip.open(out / "trace.json.gz"))
    # Kineto writes each ProfilerStep twice: the CPU range (user_annotation) and its GPU copy (gpu_user_annotation)
    steps = [e["name"] for e in doc["traceEvents"] if e.get("cat") == "user_annotation"]
    assert sum(n.startswith("ProfilerStep#") for n in steps) == 10
    assert any(e.get("cat") == "kernel" for e in doc["traceEvents"]), "no CUDA kernels in the trace"
    assert "10 steps recorded (top-level nn.Module calls)" in proc.stdout
    verdict = [line for line in proc.stdout.splitlines() if line.startswith("doctor")]
    assert verdict and verdict[0].startswith("doctor: ") and "failed" not in verdict[0], proc.stdout
    # the HTML report: one self-contained page with the same verdict and a busy/idle timeline per stream
    import html as html_lib

    assert f"HTML report -> {html}" in proc.stdout
    page = html_lib.unescape(html.read_text())
    assert verdict[0][len("doctor: "):] in page
    assert 'id="verdict"' in page and "<svg class='chart lanes'" in page and "stream" in page


def test_monitor_command_reports_energy():
    code = ("import torch, time; a = torch.randn(4096, 4096, device='cuda'); t = time.time()\n"
            "while time.time() - t < 2: a @ a\ntorch.cuda.synchronize()")
    proc = subprocess.run([sys.executable, "-m", "perflab", "monitor", "--interval", "0.05", "--",
                           sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    print(proc.stdout)
    assert proc.returncode == 0 and "GPU summary" in proc.stdout and "(counter)" in proc.stdout
