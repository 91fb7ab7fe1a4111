"""On the GPU machine: `perflab ncu` on a real program, and `perflab bench --quick`.

Run there with: python3 -m pytest -m gpu tests/gpu/test_kernels_gpu.py
"""
import json
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.gpu


def _has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


needs_gpu = pytest.mark.skipif(not _has_gpu(), reason="no CUDA GPU")


@needs_gpu
def test_perflab_ncu_profiles_a_torch_script_and_diagnoses_it(tmp_path):
    from perflab.toolkit.ncu_runner import find_ncu

    find_ncu()
    script = tmp_path / "strided.py"
    script.write_text(textwrap.dedent("""
        import torch
        x = torch.randn(8192, 8192, device="cuda")
        for _ in range(3):
            y = x.t().contiguous()   # a transpose: one side of it is strided
        torch.cuda.synchronize()
    """))
    out = tmp_path / "prof"
    proc = subprocess.run([sys.executable, "-m", "perflab", "ncu", "--launch-count", "1", "--launch-skip", "1",
                           "--out", str(out), "--json", "--", sys.executable, str(script)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["schema"] == "perflab.doctor/2" and report["source"]["kind"] == "ncu"
    assert report["findings"] and report["source"]["kernels"] == 1
    reps = list(out.glob("*.ncu-rep"))
    assert reps and reps[0].with_suffix(".csv").exists()


@needs_gpu
def test_bench_quick_is_quick_and_complete(tmp_path):
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "perflab", "bench", "--quick", "--json"], capture_output=True,
                          text=True, timeout=120, env={**__import__("os").environ, "PERFLAB_HOME": str(tmp_path)})
    elapsed = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    res = data["results"]
    assert elapsed < 45 and data["manifest"]["seconds"] < 30
    assert (tmp_path / "ceilings.json").exists()
    assert res["dram_read_smem"]["value"] >= 0.9 * res["dram_copy"]["value"]
    assert res["matmul_bf16"]["value"] > 300 and "value" in res["matmul_fp8_e4m3"]
    assert shutil.which("nvidia-smi") is None or data["manifest"]["clocks_mhz"]["sm_max"] > 0
