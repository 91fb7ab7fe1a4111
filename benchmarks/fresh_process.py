"""A tool measured in a fresh process: wall time, CPU time and peak memory of it and its workers (the benchmarks'
launcher; a child forked from a large benchmark would inherit the parent's peak RSS)."""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

# A small launcher between this (large) process and each measured tool: a child forked from a big parent starts
# with the parent's resident pages in its peak RSS (ru_maxrss survives exec: /bin/true forked from a 400 MB
# parent reports ~400 MB). The launcher is a fresh, small interpreter; the tool is forked from it, and the
# launcher reports the larger of the tool's own peak RSS (RUSAGE_CHILDREN: the largest process it waited for)
# and, when asked, the peak of its process tree's proportional set size (PSS) summed, sampled from /proc every
# 50 ms. Sampling slows the tool it watches (reading smaps_rollup walks the page tables of a process that is
# faulting in memory: a msgspec decode of a 424 MB trace took 2.2 s alone and 2.6-3.0 s sampled), so a timed run
# is never sampled: memory comes from a run of its own.
LAUNCHER = r'''
import json, os, subprocess, sys, threading, time, resource
out, sampled, cmd = sys.argv[1], sys.argv[2] == "1", sys.argv[3:]
def pss_mb(pid):
    # proportional set size: pages a forked worker shares with its parent count once across the tree, not once
    # per process as a sum of RSS would count them
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        pass
    return 0.0
def tree_mb(root):
    parent = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    parent[int(entry)] = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    tree, frontier = {root}, [root]
    while frontier:
        frontier = [p for p, pp in parent.items() if pp in frontier and p not in tree]
        tree.update(frontier)
    return sum(pss_mb(p) for p in tree)
t0 = time.perf_counter()
proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
peak, done = [0.0], threading.Event()
def sample():
    while not done.is_set():
        peak[0] = max(peak[0], tree_mb(proc.pid))
        done.wait(0.05)
if sampled:
    threading.Thread(target=sample, daemon=True).start()
rc = proc.wait()
wall = time.perf_counter() - t0
done.set()
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
own, cpu = usage.ru_maxrss / 1024.0, usage.ru_utime + usage.ru_stime
with open(out, "w") as fh:
    json.dump({"wall": wall, "peak_mb": max(own, peak[0]), "own_peak_mb": own, "tree_pss_mb": peak[0], "cpu": cpu, "rc": rc}, fh)
'''


def measured(cmd: list[str], sample_memory: bool = True) -> tuple[float, float, int, float]:
    """Run a tool in a fresh process started by a small launcher: (wall seconds, peak MB of it and its workers
    together, exit code, CPU seconds of it and its workers: on a shared machine the steadier number).
    sample_memory=False: no sampler beside it (a timed run); the peak is then the largest single process's RSS."""
    with tempfile.NamedTemporaryFile(suffix=".json") as fh:
        subprocess.run([sys.executable, "-S", "-I", "-c", LAUNCHER, fh.name, "1" if sample_memory else "0", *cmd],
                       check=True)
        r = json.loads(Path(fh.name).read_text())
    return r["wall"], r["peak_mb"], r["rc"], r["cpu"]
