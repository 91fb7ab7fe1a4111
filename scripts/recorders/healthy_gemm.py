"""Record a healthy reference trace on the GPU machine: back-to-back large bf16 GEMMs, no syncs
inside steps. The doctor must find nothing above low severity on it.

    record.py healthy-gemm [OUT_DIR]      (default tests/data/kineto)

writes OUT_DIR/<gpu>_healthy_gemm.trace.json.gz and OUT_DIR/<gpu>_healthy_gemm.manifest.json (<gpu>: h100, h200, ...)
"""
from __future__ import annotations

import gzip
import json
import shutil
import tempfile
from pathlib import Path

from recorders.common import REPO, gpu_tag


def main(argv: list[str], prog: str = "record.py healthy-gemm") -> int:
    if argv[:1] in (["-h"], ["--help"]) or len(argv) > 1:
        print(f"usage: {prog} [OUT_DIR]\n\n{__doc__}")
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    record(Path(argv[0]) if argv else REPO / "tests" / "data" / "kineto", "python3 scripts/record.py healthy-gemm " +
           " ".join(argv))
    return 0


def record(out: Path, command: str) -> None:
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
        with open(raw, "rb") as src, gzip.open(out / f"{gpu_tag()}_healthy_gemm.trace.json.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
    manifest = environment(command, "cuda")
    manifest["workload"] = f"8x per step: bf16 {n}x{n} @ {n}x{n} then a scale; 6 profiled steps"
    (out / f"{gpu_tag()}_healthy_gemm.manifest.json").write_text(json.dumps(manifest, indent=2))
