#!/usr/bin/env python3
"""Record a healthy reference trace on the GPU machine: back-to-back large bf16 GEMMs, no syncs
inside steps. The doctor must find nothing above low severity on it.

    python3 scripts/record_healthy_gemm.py OUT_DIR
writes OUT_DIR/h100_healthy_gemm.trace.json.gz and OUT_DIR/h100_healthy_gemm.manifest.json
"""
from __future__ import annotations

import gzip
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))


def main(out: Path) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    from perflab.puzzles.engine.runner import environment

    out.mkdir(parents=True, exist_ok=True)
    n = 8192
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=g)
    def step(a, b):
        for _ in range(8):
            c = a @ b
            a = c * n ** -0.5  # keeps the values at unit scale; one small elementwise per GEMM
        return a

    for _ in range(5):  # warm up exactly what is profiled (cuBLAS heuristics, lazy kernel loading)
        a = step(a, b)
    torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        sched = schedule(wait=1, warmup=1, active=6, repeat=1)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True, schedule=sched,
                     on_trace_ready=lambda p: p.export_chrome_trace(str(raw))) as prof:
            for _ in range(8):
                a = step(a, b)
                prof.step()
        torch.cuda.synchronize()
        with open(raw, "rb") as src, gzip.open(out / "h100_healthy_gemm.trace.json.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
    manifest = environment("python3 scripts/record_healthy_gemm.py " + str(out), "cuda")
    manifest["workload"] = f"8x per step: bf16 {n}x{n} @ {n}x{n} then a scale; 6 profiled steps"
    (out / "h100_healthy_gemm.manifest.json").write_text(json.dumps(manifest, indent=2))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data/kineto"))
