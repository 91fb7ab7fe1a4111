"""Wall time of the interactive commands (issue 29 item 6), each in a fresh interpreter, median of N.

    python3 benchmarks/interactive_startup.py [-n 5] SRC [SRC ...]

Each SRC is a perflab source folder (e.g. src of two checkouts); the runs are interleaved round by round so a
loaded machine weighs on every SRC alike. PERFLAB_HOME and PERFLAB_CACHE are a fresh temporary
folder per SRC: the first round fills the evidence cache, so the medians are of a warm cache."""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

COMMANDS = (["--help"], ["list"], ["show", "host-sync"], ["hint", "host-sync", "1"],
            ["answer", "host-sync", "-a", "syncs=3"], ["progress"], ["run", "host-sync", "--replay"])


def once(src: str, home: str, args: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": src, "PERFLAB_HOME": home, "PERFLAB_CACHE": home + "/cache", "COLUMNS": "120"}
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "perflab", *args], env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=5)
    ap.add_argument("srcs", nargs="+")
    a = ap.parse_args()
    homes = [tempfile.mkdtemp(prefix="perflab-bench-") for _ in a.srcs]
    times: dict[tuple[int, str], list[float]] = {}
    for _ in range(a.n):
        for args in COMMANDS:
            for i, src in enumerate(a.srcs):
                times.setdefault((i, " ".join(args)), []).append(once(src, homes[i], args))
    print("| command | " + " | ".join(a.srcs) + " |")
    print("|---|" + "---|" * len(a.srcs))
    for args in COMMANDS:
        key = " ".join(args)
        print(f"| {key} | " + " | ".join(f"{statistics.median(times[i, key]):.2f} s" for i in range(len(a.srcs))) + " |")


if __name__ == "__main__":
    main()
