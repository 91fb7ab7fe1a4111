"""Critical path: perflab (analysis/idle/critical_path.py) beside HTA's critical-path analysis on HTA's own sample
traces (../shared/peer-traces/hta/critical_path__*). For each: the window HTA analyses (an annotation), the
GPU kernels on each tool's path, the GPU time on it, how many kernels both put on it, and each tool's time.

    PYTHONPATH=src python3 benchmarks/critical_path_vs_hta.py [--hta-path DIR]

HTA (holistictraceanalysis==0.5.0) runs in a child process (its own pandas/networkx), from --hta-path where it
was installed with `pip install --target DIR holistictraceanalysis==0.5.0`, else from the environment.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

PEER = Path(__file__).resolve().parents[2] / "shared" / "peer-traces" / "hta"
CASES = {"simple_add": "[param|pytorch.model.alex_net|0|0|0|measure|forward]",
         "alexnet": "[param|pytorch.model.alex_net|0|0|0|measure|forward]"}

HTA_CHILD = r'''
import json, sys, time, shutil, tempfile, os
from hta.trace_analysis import TraceAnalysis
path, annotation = sys.argv[1], sys.argv[2]
d = tempfile.mkdtemp()
shutil.copy(path, os.path.join(d, "rank-0.json.gz"))
t0 = time.perf_counter()
a = TraceAnalysis(trace_dir=d)
g, ok = a.critical_path_analysis(rank=0, annotation=annotation, instance_id=0)
df = g.get_critical_path_breakdown() if ok else None
took = time.perf_counter() - t0
kernels = sorted(set(df[(df.stream >= 0) & (df.type == "critical_path_operator")].s_name)) if df is not None else []
gpu = float(df[(df.stream >= 0) & (df.type == "critical_path_operator")].duration.sum()) if df is not None else 0.0
print(json.dumps({"ok": bool(ok), "kernels": kernels, "gpu_us": gpu, "seconds": took,
                  "summary": {k: float(v) for k, v in (g.summary().items() if ok else [])}}))
'''


def ours(path: Path, annotation: str) -> dict:
    from perflab.analysis.idle.critical_path import critical_path
    from perflab.trace.kineto import load

    t0 = time.perf_counter()
    t = load(path)
    rows = [r for r in range(len(t)) if t.names[t.name[r]] == annotation]
    r = rows[0]
    cp = critical_path(t, float(t.ts[r]), float(t.ts[r] + t.dur[r]))
    kernels = sorted({t.names[t.name[x]] for x in cp.gpu_rows if t.kind[x] == 4})
    return {"kernels": kernels, "gpu_us": float(sum(v for k, v in cp.by_lane.items() if k.startswith("stream"))),
            "seconds": time.perf_counter() - t0, "path": cp.to_dict(), "syncs": _syncs(t, r)}


def _syncs(t, window: int) -> dict:
    """Whether the host ever waited for the GPU in the window: its synchronizing calls (their longest), and how
    long before the last one started the GPU work launched in the window had ended (slack: the GPU was done)."""
    import numpy as np

    from perflab.analysis.idle.critical_path import _selected
    from perflab.analysis.idle.syncs import is_sync_call
    from perflab.trace.model import GPU_WORK_KINDS

    rows = _selected(t, float(t.ts[window]), float(t.ts[window] + t.dur[window]))
    sync = rows[t.name_table_mask(is_sync_call)[rows]]
    gpu = rows[np.isin(t.kind[rows], list(GPU_WORK_KINDS))]
    if not sync.size or not gpu.size:
        return {}
    last = sync[np.argmax(t.ts[sync])]
    return {"count": int(sync.size), "longest_us": float(t.dur[sync].max()), "gpu_ops": int(gpu.size),
            "gpu_done_before_last_sync_us": float(t.ts[last] - (t.ts[gpu] + t.dur[gpu]).max())}


def hta(path: Path, annotation: str, hta_path: str | None) -> dict:
    env = dict(os.environ)
    if hta_path:
        env["PYTHONPATH"] = hta_path
    proc = subprocess.run([sys.executable, "-c", HTA_CHILD, str(path), annotation], capture_output=True, text=True,
                          env=env, timeout=600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    return json.loads(lines[-1]) if lines else {"ok": False, "error": (proc.stderr.strip().splitlines() or ["?"])[-1]}


def _short(name: str) -> str:
    return name.split("(")[0].split("<")[0].rsplit(" ", 1)[-1].rsplit("::", 1)[-1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hta-path", default=None)
    args = ap.parse_args(argv)
    for case, annotation in CASES.items():
        path = next(PEER.glob(f"critical_path__{case}__*.json.gz"), None)
        if path is None:
            print(f"{case}: no sample trace under {PEER}")
            continue
        mine, theirs = ours(path, annotation), hta(path, annotation, args.hta_path)
        print(f"== {case} ({annotation})")
        print(f"  perflab: {len(mine['kernels'])} kernels on the path, GPU {mine['gpu_us']:.0f} us, sets the step: "
              f"{mine['path']['sets_the_step']}, {mine['seconds']:.2f} s; host syncs {mine['syncs']}")
        if not theirs.get("ok"):
            print(f"  HTA: no result ({theirs.get('error', 'analysis failed')})")
            continue
        a, b = {_short(k) for k in mine["kernels"]}, {_short(k) for k in theirs["kernels"]}
        print(f"  HTA:     {len(theirs['kernels'])} kernels on the path, GPU {theirs['gpu_us']:.0f} us, "
              f"{theirs['seconds']:.2f} s; summary {theirs['summary']}")
        print(f"  kernels both put on the path: {len(a & b)} of {len(a | b)} distinct names "
              f"(only perflab: {sorted(a - b)[:4]}, only HTA: {sorted(b - a)[:4]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
