#!/usr/bin/env python3
"""Scale-out of the multi-rank doctor on one machine's cores: the same job read by 1, 2, 4, ... Dask workers of a real
local cluster, in one run, against HTA 0.5.0 on the same folder.

    python benchmarks/multirank_workers.py --out /tmp/scale --ranks 256 --mb 4 40 --workers 1 2 4 8 16 --hta
    python benchmarks/multirank_workers.py --out /tmp/scale --ranks 64 --mb 4 --workers 1 2     # a quick look
    python benchmarks/multirank_workers.py --out /tmp/scale --ranks 256 --mb 40 --workers 1 16 --long-lived

Per job (benchmarks/multirank_jobs.py: a planted straggler, the last rank, and a slow link between ranks 2 and 3) and
worker count: `python -m perflab doctor FOLDER --json` as a fresh child with PERFLAB_WORKERS=N and an empty cache,
its wall time, the client's peak memory and each worker's (VmHWM, multirank_scale.measured), and the findings
(id, severity, gain, the straggler): they must be the same at every worker count, the same ids and severities at
every rank size (a larger job is the same workload with more GEMMs per step), and the planted straggler found.
Speed-up is against one worker on the same job; HTA's ratio is its wall time over ours on the job it read.

--long-lived adds each count on a cluster started before the run (`perflab doctor FOLDER --scheduler ADDRESS`, as a
user reading many jobs keeps one), its start timed apart: what a job costs without the start of a cluster of its own.

--budget-s bounds the run: the largest job's ladder is predicted from the smaller job's measured rate (seconds per
GB at one worker, the start of a cluster) and from the time its generation took; a size that cannot finish in what
is left is replaced by the largest that can, and the output says so. Results go to OUT/results.json as they come.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from multirank_jobs import write_job  # noqa: E402
from multirank_scale import HTA_LOAD, measured  # noqa: E402


def doctor(folder: Path, workers: int, scheduler: str | None = None) -> dict:
    """One fresh `perflab doctor FOLDER --json`: a local cluster of `workers` of its own, or the running cluster at
    `scheduler` (`--scheduler`; the workers are then not this command's processes: no worker peaks)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])),
           "PERFLAB_CACHE": tempfile.mkdtemp(prefix="perflab-cache-"), "PERFLAB_WORKERS": str(workers)}
    env.pop("DASK_SCHEDULER_ADDRESS", None)
    cmd = [sys.executable, "-m", "perflab", "doctor", str(folder), "--json"]
    if scheduler:
        env.pop("PERFLAB_WORKERS")
        cmd += ["--scheduler", scheduler]
    wall, client, others, out, rc = measured(cmd, env)
    shutil.rmtree(env["PERFLAB_CACHE"], ignore_errors=True)
    row = {"workers": workers, "wall_s": round(wall, 2), "client_mb": round(client, 1),
           "worker_mb": [round(m) for m in sorted(others.values(), reverse=True)[:workers]], "rc": rc}
    if rc == 0:
        d = json.loads(out)
        row["findings"] = [[f["id"], f["severity"], round(f["gain_pct"], 2)] for f in d["findings"]]
        row["straggler"] = (d["analyses"].get("multigpu") or {}).get("straggler")
    return row


def long_lived(folder: Path, workers: int) -> dict:
    """The same job on a cluster started before it (what `--scheduler` offers a user who reads many jobs): the
    cluster's start timed apart, then one fresh `perflab doctor FOLDER --json --scheduler ADDRESS`."""
    from perflab.multirank.engine import start_local_cluster

    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    t0 = time.perf_counter()
    cluster = start_local_cluster(workers)   # as the engine starts its own
    start_s = time.perf_counter() - t0
    try:
        row = doctor(folder, workers, scheduler=cluster.scheduler_address)
    finally:
        cluster.close()
    row["cluster_start_s"] = round(start_s, 2)
    return row


def hta(folder: Path, python: str, timeout_s: float) -> dict:
    import subprocess

    t0 = time.perf_counter()
    try:
        proc = subprocess.run([python, "-c", HTA_LOAD, str(folder)], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"stopped after {timeout_s:.0f} s", "more_than_s": round(timeout_s, 1)}
    if proc.returncode:
        return {"error": (proc.stderr.strip().splitlines() or ["exit %d" % proc.returncode])[-1][:200]}
    return {"wall_s": round(time.perf_counter() - t0, 2)}


def phases(folder: Path, workers: int) -> dict:
    """multirank_phases.py's child at `workers`: start, map, merge, close (wall and client CPU s), workers' CPU s."""
    import subprocess

    from multirank_phases import CHILD

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])),
           "PERFLAB_WORKERS": str(workers), "PERFLAB_CACHE": tempfile.mkdtemp(prefix="perflab-cache-")}
    got = subprocess.run([sys.executable, "-c", CHILD, str(folder)], env=env, capture_output=True, text=True)
    shutil.rmtree(env["PERFLAB_CACHE"], ignore_errors=True)
    if got.returncode:
        return {"error": (got.stderr.strip().splitlines() or ["exit %d" % got.returncode])[-1][:200]}
    return json.loads(got.stdout.strip().splitlines()[-1])


def fits(mb: float, ranks: int, ladder: list[int], rate_s_per_gb: float, start_s: float, gen_s_per_gb: float) -> float:
    """Predicted seconds for a job of `mb` per rank: its generation, then one doctor run per worker count (the work
    split evenly, each run paying a cluster's start)."""
    gb = ranks * mb / 1e3
    return gen_s_per_gb * gb + sum(start_s + rate_s_per_gb * gb / w for w in ladder)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--ranks", type=int, default=256)
    ap.add_argument("--mb", type=float, nargs="+", default=[4.0, 40.0], help="MB of JSON per rank, smallest first")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--hta", action="store_true", help="HTA 0.5.0 on the smallest job (this python must import hta)")
    ap.add_argument("--hta-python", default=sys.executable)
    ap.add_argument("--budget-s", type=float, default=None, help="seconds the whole run may take")
    ap.add_argument("--jobs", type=Path, default=None, help="where the jobs are written (default: a temporary folder)")
    ap.add_argument("--long-lived", action="store_true", help="also each count on a cluster started before the run "
                                                                  "(perflab doctor --scheduler), its start timed apart")
    ap.add_argument("--phases", type=int, default=0, help="then on the largest job, where N workers' time goes "
                                                          "(benchmarks/multirank_phases.py: start, map, merge, close)")
    a = ap.parse_args()
    t_start = time.perf_counter()
    left = (lambda: a.budget_s - (time.perf_counter() - t_start)) if a.budget_s else (lambda: float("inf"))
    a.out.mkdir(parents=True, exist_ok=True)
    jobs = a.jobs or Path(tempfile.mkdtemp(prefix="perflab-ranks-"))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    results: dict = {"cores": cores, "python": sys.version.split()[0], "ranks": a.ranks, "workers": a.workers,
                     "jobs": [], "notes": []}

    def save() -> None:
        (a.out / "results.json").write_text(json.dumps(results, indent=1))

    print(f"{cores} cores; {a.ranks} ranks; workers {a.workers}", flush=True)
    print(f"{'MB/rank':>7} {'GB':>6} {'workers':>7} {'wall s':>7} {'x1 worker':>9} {'client MB':>9} "
          f"{'worker MB (max)':>15}  findings", flush=True)
    rate = start = gen_rate = None
    for n, mb in enumerate(sorted(a.mb)):
        if rate is not None and a.budget_s:
            want = fits(mb, a.ranks, a.workers, rate, start, gen_rate)
            room = left() - (60.0 if a.hta else 0.0)
            if want > room:
                best = max((m for m in (40, 32, 24, 20, 16, 12, 10, 8, 6) if m <= mb and
                            fits(m, a.ranks, a.workers, rate, start, gen_rate) <= room), default=None)
                note = (f"{a.ranks} x {mb:g} MB does not fit the budget: predicted {want:.0f} s (generation "
                        f"{gen_rate:.1f} s/GB, {rate:.1f} s/GB at one worker, {start:.1f} s per cluster start) with "
                        f"{room:.0f} s left; " + (f"{best:g} MB per rank instead" if best else "skipped"))
                print(note, flush=True)
                results["notes"].append(note)
                if best is None:
                    continue
                mb = float(best)
        folder = jobs / f"{a.ranks}x{mb:g}MB"
        t = time.perf_counter()
        info = write_job(folder, a.ranks, mb, a.ranks - 1, 2, processes=max(1, cores or 1))
        gen_s = time.perf_counter() - t
        job = {"mb": mb, "gb": round(info["bytes"] / 1e9, 3), "generate_s": round(gen_s, 2), "runs": [], **info}
        results["jobs"].append(job)
        base = None
        for w in a.workers:
            row = doctor(folder, w)
            job["runs"].append(row)
            base = base or row
            same = "same" if row.get("findings") == base.get("findings") and row.get("straggler") == base.get(
                "straggler") else "DIFFER"
            planted = "planted" if row.get("straggler") == a.ranks - 1 else "NOT planted"
            found = f"straggler {row.get('straggler')} ({planted})"
            print(f"{mb:7g} {job['gb']:6.2f} {w:7d} {row['wall_s']:7.1f} {base['wall_s'] / row['wall_s']:8.2f}x "
                  f"{row['client_mb']:9.0f} {max(row['worker_mb'] or [0]):15.0f}  {same}, {found}", flush=True)
            save()
            if a.long_lived:
                kept = long_lived(folder, w)
                job.setdefault("long_lived", []).append(kept)
                same = "same" if kept.get("findings") == base.get("findings") and kept.get("straggler") == base.get(
                    "straggler") else "DIFFER"
                print(f"{'':7} {'':6} {w:7d} {kept['wall_s']:7.1f} {base['wall_s'] / kept['wall_s']:8.2f}x "
                      f"{kept['client_mb']:9.0f} {'':>15}  {same}; on a cluster started before "
                      f"({kept['cluster_start_s']:.1f} s, not counted)", flush=True)
                save()
        one = job["runs"][0]
        if n == 0 and one["workers"] == 1:
            two = job["runs"][-1]
            # one worker's rate and a cluster's start, from the smallest job's first and last runs
            start = max(0.5, (two["wall_s"] * two["workers"] - one["wall_s"]) / max(two["workers"] - 1, 1)
                        if two is not one else 2.0)
            start = min(start, one["wall_s"] / 2)
            rate = max(0.1, (one["wall_s"] - start) / max(job["gb"], 1e-3))
            gen_rate = gen_s / max(job["gb"], 1e-3)
        if a.phases and n == len(a.mb) - 1 and left() > 30:
            job["phases"] = phases(folder, a.phases)
            print(f"{'':7} where {a.phases} workers' time goes (wall/CPU s of the client): {job['phases']}", flush=True)
            save()
        shutil.rmtree(folder, ignore_errors=True) if n else None
    # the same job must give the same report whatever the cluster, and a job of any size is the same workload larger
    # (multirank_jobs: the straggle is a share of the step), so its findings must be the same at every size too
    results["same_findings_every_worker_count"] = all(
        len({json.dumps([r.get("findings"), r.get("straggler")]) for r in j["runs"] + j.get("long_lived", [])}) == 1
        for j in results["jobs"])
    results["same_findings_every_size"] = len({json.dumps([[f[0], f[1]] for f in r.get("findings") or []])
                                               for j in results["jobs"] for r in j["runs"]}) == 1
    results["straggler_found_every_size"] = all(r.get("straggler") == a.ranks - 1 for j in results["jobs"]
                                                for r in j["runs"])
    print(f"the same findings at every worker count: {results['same_findings_every_worker_count']}; at every size: "
          f"{results['same_findings_every_size']}; the planted straggler found at every size and count: "
          f"{results['straggler_found_every_size']}", flush=True)
    if a.hta and results["jobs"]:
        small = results["jobs"][0]
        folder = jobs / f"{a.ranks}x{small['mb']:g}MB"
        r = hta(folder, a.hta_python, max(10.0, min(left(), 120.0)))
        small["hta"] = r
        if "wall_s" in r:
            ratios = ", ".join(f"{run['workers']} worker(s) {r['wall_s'] / run['wall_s']:.1f}x"
                               for run in small["runs"])
            print(f"HTA 0.5.0 on {a.ranks} x {small['mb']:g} MB: {r['wall_s']:.1f} s; HTA / perflab: {ratios}",
                  flush=True)
        elif "more_than_s" in r:   # still a ratio: HTA took longer than this
            ratios = ", ".join(f"{run['workers']} worker(s) > {r['more_than_s'] / run['wall_s']:.1f}x"
                               for run in small["runs"])
            print(f"HTA 0.5.0 on {a.ranks} x {small['mb']:g} MB: not done in {r['more_than_s']:.0f} s; HTA / perflab: "
                  f"{ratios}", flush=True)
        else:
            print(f"HTA 0.5.0 on {a.ranks} x {small['mb']:g} MB: {r['error']}", flush=True)
    save()
    if not a.jobs:
        shutil.rmtree(jobs, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
