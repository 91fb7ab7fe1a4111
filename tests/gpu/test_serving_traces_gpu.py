"""Serving and compiled programs under `perflab profile` on the GPU, read as their users need them read:

- a serving loop with vLLM-style iteration annotations, a long prompt prefilled every few steps and the host running
  ahead (examples/stacks/serving_loop.py): iterations on the GPU's clock, a prefill-stall; chunked: healthy iterations;
- a `reduce-overhead` decoder block and an HF static-cache `generate`: the graph replays priced (the capture that
  perflab profile records during warm-up), at least 90 % of the GPU time;
- attention in fp32 (a SIMT kernel): no-tensor-cores, never healthy.

With $PERFLAB_GPU_ARTIFACTS set, each run's log, trace and doctor JSON are kept there.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from gpu_artifacts import keep

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

ROOT = Path(__file__).resolve().parents[2]
STACKS = ROOT / "examples" / "stacks"
MODEL = "layers=16,hidden=2048,intermediate=8192,heads=16,kv_heads=4,vocab=32000,dtype=bf16"   # serving_loop.py's


def _profile(tmp_path: Path, tag: str, *cmd: str, marker: str | None = None, steps: int = 10,
             warmup: int = 5, timeout: int = 300) -> tuple[Path, dict]:
    out = tmp_path / tag
    args = [sys.executable, "-m", "perflab", "profile", "--out", str(out), "--steps", str(steps), "--warmup",
            str(warmup), *(["--marker", marker] if marker else []), "--", sys.executable, *cmd]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    trace = out / "trace.json.gz"
    doc_args = [sys.executable, "-m", "perflab", "doctor", str(trace), "--json"]
    if tag.startswith("serving"):
        doc_args += ["--model", MODEL]
    doctor = subprocess.run(doc_args, capture_output=True, text=True, timeout=300)
    report_file = out / "doctor.json"
    report_file.write_text(doctor.stdout)
    keep(tag, proc, trace, report_file, stderr_tail=20000)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert doctor.returncode == 0, doctor.stderr[-3000:]
    return trace, json.loads(doctor.stdout)


def test_a_serving_loop_with_whole_prefills_stalls_its_decodes(tmp_path):
    _, report = _profile(tmp_path, "serving_whole", str(STACKS / "serving_loop.py"), "--steps", "80",
                         marker="execute_context_.*", steps=32, warmup=8)
    s = report["analyses"]["serving"]
    assert s["engine"] == "vLLM" and s["iterations"] >= 30
    steps = s["steps"]
    assert steps["prefill_forward_p50_ms"] > 5 * steps["decode_forward_p50_ms"]
    assert report["findings"][0]["id"] == "prefill-stall"
    # never a step shorter than its own GPU time
    summary, sol = report["analyses"]["summary"], report["analyses"]["speed_of_light"]["step"]
    step_ms = max(summary["step_time_ms"], summary.get("step_time_mean_ms") or 0)
    assert step_ms * 1e3 >= 0.99 * sol["gpu_us"]
    assert s["roof"]["priced_iterations"] >= 30 and s["roof"]["pct_of_roof"] is not None


def test_chunked_prefill_leaves_the_decodes_alone(tmp_path):
    _, report = _profile(tmp_path, "serving_chunked", str(STACKS / "serving_loop.py"), "--steps", "80", "--chunk",
                         "512", marker="execute_context_.*", steps=32, warmup=8)
    assert "prefill-stall" not in [f["id"] for f in report["findings"]]
    s = report["analyses"]["serving"]
    assert s["itl_ms"]["p99"] < 3 * s["itl_ms"]["p50"]


@pytest.mark.parametrize("tag, cmd", [
    ("reduce_overhead", (str(STACKS / "compiled_block.py"), "--as", "module", "--mode", "reduce-overhead",
                         "--iters", "300")),
    ("hf_static", (str(STACKS / "hf_generate.py"), "--cache", "static", "--calls", "4")),
    ("hf_static_compiled", (str(STACKS / "hf_generate.py"), "--cache", "static", "--compile", "--calls", "4")),
])
def test_graph_replays_are_priced_from_the_capture_recorded_in_warm_up(tmp_path, tag, cmd):
    trace, report = _profile(tmp_path, tag, *cmd, timeout=420)
    step = report["analyses"]["speed_of_light"]["step"]
    assert step["coverage_pct"] >= 90, report["analyses"]["speed_of_light"].get("unmodelled")
    assert report["findings"] and report["findings"][0]["id"] != "not-judged"
    import gzip

    with gzip.open(trace, "rt") as fh:
        doc = json.load(fh)
    replays = any(e.get("name", "").startswith("cudaGraphLaunch") for e in doc["traceEvents"])
    # where the steps replay graphs, their capture (made in warm-up) was recorded into the trace
    assert not replays or doc.get("perflab_captures", 0) >= 1


def test_fp32_attention_is_not_healthy(tmp_path):
    script = tmp_path / "fp32_attention.py"
    script.write_text(
        "import torch, torch.nn.functional as F\n"
        "class Attention(torch.nn.Module):\n"
        "    def forward(self, q, k, v):\n"
        "        return F.scaled_dot_product_attention(q, k, v, is_causal=True)\n"
        "attn = Attention()\n"
        "q, k, v = (torch.randn(8, 16, 2048, 64, device='cuda') for _ in range(3))\n"
        "for _ in range(40):\n"
        "    attn(q, k, v)\n"
        "torch.cuda.synchronize()\n")
    _, report = _profile(tmp_path, "fp32_attention", str(script), steps=10, warmup=5)
    ids = [f["id"] for f in report["findings"]]
    assert "healthy" not in ids and ids[0] == "no-tensor-cores"
