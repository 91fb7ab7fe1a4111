"""GPUMonitor's overhead: a GPU-bound loop of large matmuls with and without 10 ms sampling.

    python benchmarks/overhead_monitor.py [--rounds 10] [--seconds 1.0]

Blocks with and without the monitor alternate (ABAB...), so clock and thermal drift hit both
alike; each block is timed with CUDA events. Prints the ratio of medians; the bar is 1.01.
"""
from __future__ import annotations

import argparse
import statistics
import sys

BAR = 1.01


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=1.0, help="GPU time per block")
    ap.add_argument("--interval", type=float, default=0.01)
    args = ap.parse_args()

    import torch

    from perflab import GPUMonitor
    from perflab.errors import PerflabError

    if not torch.cuda.is_available():
        print("overhead_monitor: no CUDA GPU here: nothing to measure")
        return 0
    try:
        GPUMonitor().open()
    except PerflabError as exc:
        print(f"overhead_monitor: {exc}")
        return 0

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn_like(a)

    def block(n: int) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(n):
            a @ b
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    block(20)
    per_matmul = block(20) / 20
    n = max(1, int(args.seconds * 1e3 / per_matmul))
    off, on, samples = [], [], 0
    for _ in range(args.rounds):
        off.append(block(n))
        with GPUMonitor(interval=args.interval) as mon:
            on.append(block(n))
        samples += len(mon.samples)
    ratio = statistics.median(on) / statistics.median(off)
    print(f"overhead_monitor: {n} matmuls (8192², bf16) per block, {args.rounds} rounds; "
          f"median {statistics.median(off):.1f} ms without, {statistics.median(on):.1f} ms with "
          f"{args.interval * 1e3:g} ms sampling ({samples / args.rounds:.0f} samples/block)")
    print(f"ratio with/without: {ratio:.4f} ({'within' if ratio <= BAR else 'OVER'} the {BAR} bar)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
