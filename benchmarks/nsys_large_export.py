#!/usr/bin/env python3
"""perflab on a large Nsight Systems export: wall time and peak memory of the doctor and of stats.

    python benchmarks/nsys_large_export.py --gb 5          # synthesize a ~5 GB export, diagnose it
    python benchmarks/nsys_large_export.py --gb 1 --keep /tmp/big.sqlite

The export (nsys 2025 schema, written by tests/nsys_exports.py for the tables and by SQLite itself for
the bulk rows) holds one host thread launching kernels back to back with a stream synchronize every
1,000 launches: per launch one CUDA API row and one kernel row. Each command runs in a fresh child
process; peak RSS comes from os.wait4.
"""
from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from nsys_exports import ExportBuilder, global_pid, global_tid  # noqa: E402

BYTES_PER_LAUNCH = 115  # measured: a kernel row and an API row of this layout (nsys writes no index)
PERIOD_NS, KERNELS = 10_000, 50


def synthesize(path: Path, launches: int) -> None:
    b = ExportBuilder()
    names = [b.sid(f"void gemm_tile_kernel<{i}>(float const*, float const*, float*, int, int, int)") for i in range(KERNELS)]
    b.kernel("warmup_kernel", 3_000)
    b.synchronize("cudaStreamSynchronize_v3020", 2)
    launch, sync = b.sid("cudaLaunchKernel_v7000"), b.sid("cudaStreamSynchronize_v3020")
    b.write(path, era="2025")
    con = sqlite3.connect(path)
    gt, gp, t0 = global_tid(b.pid, b.tid), global_pid(b.pid), 10_000_000
    seq = f"WITH RECURSIVE s(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM s WHERE x < {launches - 1}) "
    cols = [r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")]
    value = {"start": f"{t0} + x * {PERIOD_NS} + 5000", "end": f"{t0} + x * {PERIOD_NS} + 8000 + (x % 7) * 100",
             "deviceId": "0", "contextId": "1", "streamId": "7", "correlationId": "1000 + x", "globalPid": str(gp),
             "demangledName": f"{names[0]} + x % {KERNELS}", "shortName": f"{names[0]} + x % {KERNELS}",
             "mangledName": f"{names[0]} + x % {KERNELS}", "launchType": "1", "registersPerThread": "64",
             "gridX": "1 + x % 1000", "gridY": "1", "gridZ": "1", "blockX": "128", "blockY": "1", "blockZ": "1",
             "staticSharedMemory": "0", "dynamicSharedMemory": "49152", "gridId": "x"}
    con.execute(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL {seq} SELECT {', '.join(value.get(c, 'NULL') for c in cols)} FROM s")
    con.execute(f"INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME {seq} SELECT {t0} + x * {PERIOD_NS}, {t0} + x * {PERIOD_NS} "
                f"+ 4000, 0, {gt}, 1000 + x, {launch}, 0, NULL FROM s")
    every = 1000
    con.execute(f"INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME {seq} SELECT {t0} + x * {PERIOD_NS} + 9000, {t0} + x * "
                f"{PERIOD_NS} + 9500, 0, {gt}, 2000000000 + x, {sync}, 0, NULL FROM s WHERE x % {every} = {every - 1}")
    con.commit()
    con.close()


def measured(cmd: list[str]) -> tuple[float, float, int, str]:
    """Wall time, peak RSS (MB) and exit code of one child process, and what it printed."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        out.seek(0)
        err.seek(0)
        text, problem = out.read().decode(errors="replace"), err.read().decode(errors="replace").strip()
    if problem:
        print("   ", problem.splitlines()[-1][:200])
    return time.perf_counter() - start, usage.ru_maxrss / 1024.0, os.waitstatus_to_exitcode(status), text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=5.0, help="target export size")
    ap.add_argument("--keep", type=Path, help="write the export here (and reuse it when it exists)")
    args = ap.parse_args()
    launches = int(args.gb * 1e9 / BYTES_PER_LAUNCH)
    with tempfile.TemporaryDirectory() as d:
        path = args.keep or Path(d) / "big.sqlite"
        if not path.exists():
            t = time.perf_counter()
            synthesize(path, launches)
            print(f"wrote {path}: {path.stat().st_size / 1e9:.2f} GB, {launches:,} launches "
                  f"({2 * launches:,} rows) in {time.perf_counter() - t:.0f} s")
        for label, cmd in (("load only", [sys.executable, "-c", "import sys; from perflab.trace import nsys; "
                                                              "t = nsys.load(sys.argv[1]); print(len(t))", str(path)]),
                           ("perflab doctor --json", [sys.executable, "-m", "perflab", "doctor", "--json", str(path)]),
                           ("perflab stats --json", [sys.executable, "-m", "perflab", "stats", "--json", str(path)])):
            wall, rss, rc, text = measured(cmd)
            print(f"{label}: {wall:.1f} s wall, {rss / 1024:.2f} GB peak RSS, exit {rc}")
            if label.startswith("perflab doctor") and rc == 0:
                report = json.loads(text)
                print(f"    verdict: {report['verdict']}")
                print(f"    GPU busy {report['analyses']['summary']['gpu_busy_pct']:.1f} %, "
                      f"{report['analyses']['launches']['kernels']:,} kernels analysed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
