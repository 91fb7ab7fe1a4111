#!/usr/bin/env python3
"""Where a multi-rank doctor run spends its time: cluster start, the summaries' map, the merge, the close.

    python benchmarks/multirank_phases.py FOLDER --workers 0 1 2 --repeat 3

Each run is a fresh child process with an empty cache (the workers alternate, so a change in the machine's
load falls on every worker count alike). Per phase: wall seconds and the CPU seconds of the client process; with
workers, also the workers' own CPU seconds up to the map's end (their start included). On a shared machine wall
time is what the other users leave: compare the `map` column between worker counts of the same repeat.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHILD = r'''
import json, os, resource, sys, time
def cpu():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime
def main():
    from perflab.multirank.engine import Engine, plan
    from perflab.multirank.merge import merge_job
    from perflab.multirank.store import list_folder
    out, t, c = {}, time.perf_counter(), cpu()
    def lap(name):
        nonlocal t, c
        out[name] = [round(time.perf_counter() - t, 2), round(cpu() - c, 2)]
        t, c = time.perf_counter(), cpu()
    files = list_folder(sys.argv[1])
    how = plan(files)
    engine = Engine(how).__enter__()
    lap("start")
    summaries = engine.summaries(files, report_of=files[0])
    lap("map")
    if engine.client is not None:  # the workers' own CPU (their processes live until close)
        def used():
            import resource
            u = resource.getrusage(resource.RUSAGE_SELF)
            return u.ru_utime + u.ru_stime
        out["workers_cpu"] = round(sum(engine.client.run(used).values()), 2)
    merge_job(sys.argv[1], summaries, lambda v: engine.report(v.meta["path"]))
    lap("merge")
    engine.__exit__(None, None, None)
    lap("close")
    print(json.dumps(out))
if __name__ == "__main__":
    main()
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    print(f"{'repeat':>6} {'workers':>7}  " + "  ".join(f"{p + ' wall/cpu s':>17}" for p in
                                                      ("start", "map", "merge", "close")))
    for n in range(a.repeat):
        for w in a.workers:
            env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "PERFLAB_WORKERS": str(w),
                   "PERFLAB_CACHE": tempfile.mkdtemp(prefix="perflab-cache-")}
            env.pop("DASK_SCHEDULER_ADDRESS", None)
            got = subprocess.run([sys.executable, "-c", CHILD, str(a.folder)], env=env, capture_output=True, text=True)
            if got.returncode:
                print(got.stderr.strip().splitlines()[-1], file=sys.stderr)
                return 1
            phases = json.loads(got.stdout.strip().splitlines()[-1])
            workers_cpu = phases.pop("workers_cpu", None)
            print(f"{n:6d} {w:7d}  " + "  ".join(f"{wall:9.2f}/{cpu:<7.2f}" for wall, cpu in phases.values())
                  + (f"  workers' CPU s (start + map) {workers_cpu:.2f}" if workers_cpu is not None else ""),
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
