"""`perflab profile` against a plain run of the example (examples/tiny_gpt_inference.py).

    python benchmarks/overhead_profile.py [--repeats 3] [-- EXAMPLE ARGS]

Three variants, interleaved: plain; detection only (steps counted but nothing recorded: a warm-up
longer than the run); and the default profile (3 warm-up + 10 recorded steps). For each: the
command's wall time and the decode time the example reports itself. Prints ratios to plain.
"""
from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "tiny_gpt_inference.py"
DECODE = re.compile(r"decoded \d+ tokens in ([0-9.]+) s")


def run(cmd: list[str]) -> tuple[float, float]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    match = DECODE.search(proc.stdout)
    if not match:
        raise SystemExit(f"no decode time in the output of {' '.join(cmd)}:\n{proc.stdout}\n{proc.stderr[-2000:]}")
    return wall, float(match.group(1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("example_args", nargs="*", default=["--rounds", "5"])
    args = ap.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("overhead_profile: no CUDA GPU here: measuring the CPU run of the example instead")
    script = [sys.executable, str(EXAMPLE), *args.example_args]
    with tempfile.TemporaryDirectory() as out:
        perflab = [sys.executable, "-m", "perflab", "profile", "--out", out]
        variants = {
            "plain": script,
            "detection only": [*perflab, "--warmup", "1000000", "--steps", "1", "--", *script],
            "profile (3 + 10 steps)": [*perflab, "--", *script],
        }
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
        run(script)  # warm the file cache and the GPU
        for _ in range(args.repeats):
            for name, cmd in variants.items():
                results[name].append(run(cmd))
    base_wall = statistics.median(w for w, _ in results["plain"])
    base_decode = statistics.median(d for _, d in results["plain"])
    print(f"overhead_profile: {' '.join(script[1:])}, {args.repeats} interleaved repeats (medians)")
    for name, rows in results.items():
        wall = statistics.median(w for w, _ in rows)
        decode = statistics.median(d for _, d in rows)
        print(f"  {name:<24} wall {wall:6.2f} s ({wall / base_wall:5.2f}x)   decode {decode:6.3f} s "
              f"({decode / base_decode:5.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
