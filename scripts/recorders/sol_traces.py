"""Record, on the GPU machine, the traces that check the doctor's speed-of-light reasoning:

  fp8_wo_eager_mlp    a decode-shaped SwiGLU MLP (M = 1) whose weights torchao's Float8WeightOnlyConfig
                      quantized, run eagerly; beside it the same MLP in bf16 (bf16_eager_mlp)
  attention_by_hand   attention written out at S = 2,048 (scores, scale, causal mask, cast, softmax, cast,
                      matmul); beside it F.scaled_dot_product_attention on the same tensors (attention_sdpa)

Each variant is timed (CUDA events around each call after warm-up, fresh random inputs, median of 50) and
profiled with torch.profiler(record_shapes=True) over 5 steps. Writes into OUT: NAME.trace.json.gz per
variant, measurements.json (per variant: median_ms, samples_ms, and the slowdown of each pair) and
manifest.json (GPU, driver, versions, date, command). Run after `source scripts/device_env.sh`:

    record.py sol-traces OUT
"""
from __future__ import annotations

import gzip
import json
import platform
import shutil
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

HIDDEN, INTERMEDIATE = 4096, 14336           # a Llama-3-8B-shaped MLP
HEADS, SEQ, HEAD_DIM = 16, 2048, 64


def mlp(torch, dtype=None):
    class SwiGLU(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gate = torch.nn.Linear(HIDDEN, INTERMEDIATE, bias=False)
            self.up = torch.nn.Linear(HIDDEN, INTERMEDIATE, bias=False)
            self.down = torch.nn.Linear(INTERMEDIATE, HIDDEN, bias=False)

        def forward(self, x):
            return self.down(torch.nn.functional.silu(self.gate(x)) * self.up(x))

    return SwiGLU().to("cuda", torch.bfloat16).eval()


def attention_by_hand(torch, q, k, v):
    scores = torch.matmul(q, k.transpose(-2, -1))
    scores = scores * (1.0 / HEAD_DIM ** 0.5)
    mask = torch.ones(SEQ, SEQ, dtype=torch.bool, device=q.device).triu(1)
    scores = scores.masked_fill(mask, float("-inf"))
    probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    return torch.matmul(probs, v)


def timed(torch, fn, make_inputs, reps=50, warmup=10):
    for _ in range(warmup):
        fn(*make_inputs())
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        args = make_inputs()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args)
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    samples.sort()
    return {"median_ms": samples[len(samples) // 2], "samples_ms": [round(s, 5) for s in samples]}


def profiled(torch, fn, make_inputs, path: Path, steps=5):
    """`steps` ProfilerSteps after warm-up, as a user profiles a decode loop's steady state (no sync per step)."""
    from torch.profiler import ProfilerActivity, profile, schedule

    raw = path.with_suffix("")  # NAME.trace.json
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True,
                 schedule=schedule(wait=0, warmup=2, active=steps),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(raw))) as prof:
        for _ in range(steps + 2):
            fn(*make_inputs())
            prof.step()
    torch.cuda.synchronize()
    with open(raw, "rb") as src, gzip.open(path, "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()


def manifest(torch, command: str) -> dict:
    smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
    import torchao

    return {"gpu": torch.cuda.get_device_name(), "cc": ".".join(map(str, torch.cuda.get_device_capability())),
            "driver": smi, "cuda": torch.version.cuda, "torch": torch.__version__, "torchao": torchao.__version__,
            "python": platform.python_version(), "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "command": command, "host": platform.node()}


def main(argv: list[str], prog: str = "record.py sol-traces") -> int:
    if argv[:1] in (["-h"], ["--help"]) or len(argv) > 1:
        print(f"usage: {prog} [OUT]  (default: sol-traces)\n\n{__doc__}")
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    t0 = time.time()
    record(Path(argv[0] if argv else "sol-traces"), "python3 scripts/record.py sol-traces " + " ".join(argv))
    print(f"recorded in {time.time() - t0:.0f} s")
    return 0


def record(out: Path, command: str) -> None:
    import torch
    from torchao.quantization import Float8WeightOnlyConfig, quantize_

    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    results = {}
    with torch.no_grad():
        bf16 = mlp(torch)
        fp8 = mlp(torch)
        fp8.load_state_dict(bf16.state_dict())
        quantize_(fp8, Float8WeightOnlyConfig())
        x = lambda: (torch.randn(1, HIDDEN, device="cuda", dtype=torch.bfloat16),)  # noqa: E731
        err = (fp8(*x()) - bf16(*x())).abs().max().item()  # different inputs: only a smoke check that it runs
        for name, model in (("bf16_eager_mlp", bf16), ("fp8_wo_eager_mlp", fp8)):
            results[name] = timed(torch, model, x)
            profiled(torch, model, x, out / f"{name}.trace.json.gz")
            print(f"{name}: median {results[name]['median_ms']:.4f} ms", flush=True)
        qkv = lambda: tuple(torch.randn(1, HEADS, SEQ, HEAD_DIM, device="cuda", dtype=torch.bfloat16)  # noqa: E731
                            for _ in range(3))
        q, k, v = qkv()
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        rel = ((attention_by_hand(torch, q, k, v).float() - ref.float()).norm() / ref.float().norm()).item()
        sdpa = lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
        by_hand = lambda q, k, v: attention_by_hand(torch, q, k, v)  # noqa: E731
        for name, fn in (("attention_sdpa", sdpa), ("attention_by_hand", by_hand)):
            results[name] = timed(torch, fn, qkv)
            profiled(torch, fn, qkv, out / f"{name}.trace.json.gz")
            print(f"{name}: median {results[name]['median_ms']:.4f} ms", flush=True)
    results["slowdown"] = {
        "fp8_wo_eager_mlp_vs_bf16": results["fp8_wo_eager_mlp"]["median_ms"] / results["bf16_eager_mlp"]["median_ms"],
        "attention_by_hand_vs_sdpa": results["attention_by_hand"]["median_ms"] / results["attention_sdpa"]["median_ms"]}
    results["checks"] = {"attention_rel_error_vs_sdpa": rel, "fp8_runs_max_abs_output": err,
                         "shapes": {"mlp": [1, HIDDEN, INTERMEDIATE], "attention": [1, HEADS, SEQ, HEAD_DIM]}}
    (out / "measurements.json").write_text(json.dumps(results, indent=1))
    (out / "manifest.json").write_text(json.dumps(manifest(torch, command), indent=1))
    print(json.dumps({**results["slowdown"], **results["checks"]}, indent=1))


