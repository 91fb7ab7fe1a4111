"""What cuBLAS does with a bf16 GEMM whose inner dimension K breaks 16-byte rows (the below-roof puzzle, 68).

For each M and each K in (4096, 4097, 4098, 4100, 4104), x [M, K] @ W [4096, K]^T as F.linear(x, W) (both
operands K-major, leading dimension K), plus F.linear(x, W, b) at K = 4096 (the puzzle's fix): the kernel
cuBLAS picks (torch.profiler) and its median time over 30 CUDA-event-timed calls. Prints one JSON line per
case; with --json FILE also writes them there. A few seconds on an H100:

    python3 proto/alignment_probe.py [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

MS = (2048, 4096)
KS = (4096, 4097, 4098, 4100, 4104)
N = 4096


def kernel_of(fn) -> str:
    """The longest kernel one call of fn launches."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
    events = [e for e in prof.events() if e.device_type.name == "CUDA"]
    return max(events, key=lambda e: e.device_time_total).name if events else "?"


def median_ms(fn) -> float:
    return statistics.median(_common.cuda_times_ms(fn))


def main() -> None:
    import torch
    import torch.nn.functional as F

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()
    rows = []
    for m in MS:
        cases = [(k, False) for k in KS] + [(4096, True)]
        for k, bias in cases:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(N, k, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(N, device="cuda", dtype=torch.bfloat16) if bias else None
            fn = (lambda x=x, w=w, b=b: F.linear(x, w, b))
            ms = median_ms(fn)
            row = {"M": m, "K": k, "N": N, "bias": bias, "row_bytes_mod_16": k * 2 % 16, "median_ms": round(ms, 4),
                   "tflops": round(2 * m * k * N / ms / 1e9, 1), "kernel": kernel_of(fn)[:160],
                   "device": torch.cuda.get_device_name(), "torch": torch.__version__}
            print(json.dumps(row), flush=True)
            rows.append(row)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
