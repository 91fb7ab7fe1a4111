#!/usr/bin/env python3
"""perflab doctor on synthetic multi-rank jobs: wall time, client and worker peak memory, the straggler found.

    python benchmarks/multirank_scale.py --quick          # 8 ranks x 4 MB and 64 ranks x 1 MB, 1 and 2 workers
    python benchmarks/multirank_scale.py                  # 8, 64, 256 ranks x 40 MB (10 GB at 256: ask first)
    python benchmarks/multirank_scale.py --ranks 64 --mb 2 --workers 1 2 --single --hta

Jobs come from benchmarks/multirank_jobs.py (a planted straggler, the last rank, and a slow link between ranks
2 and 3). Every measured run is a fresh `python -m perflab doctor FOLDER --json` child of this small process,
with an empty cache; the peak memory of the client and of every process it starts (the Dask workers) is read
from /proc/PID/status VmHWM while they run. --single also runs today's single-process path
(perflab.doctor.diagnose, every rank's trace in one process) and the summary path in one process, both through
the Python API (the CLI starts slower than `import perflab.doctor`); --hta runs HTA 0.5.0's TraceAnalysis on
the same folder (its virtual environment as benchmarks/doctor_vs_hta.py makes it; the worker column is then
its parser's process pool).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from multirank_jobs import write_job  # noqa: E402

HTA_PY = ROOT / ".bench" / "hta-venv" / "bin" / "python"
HTA_LOAD = r'''
import logging, sys, warnings
warnings.filterwarnings("ignore"); logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[1])
ta.get_temporal_breakdown(visualize=False)
ta.get_comm_comp_overlap(visualize=False)
'''
SINGLE = "import sys; from perflab.doctor import diagnose; r = diagnose(sys.argv[1]); print(r.analyses['multigpu']['straggler'])"
# the summary path in this process through the same API (the CLI's own start costs ~1.5 s more than this import)
SUMMARIES = ("import sys; from perflab.multirank import diagnose_folder; r = diagnose_folder(sys.argv[1]); "
             "print(r.analyses['multigpu']['straggler'])")


def _children(pid: int) -> list[int]:
    out = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            text = (task / "children").read_text().split()
            out += [int(c) for c in text]
    except OSError:
        pass
    return out


def _hwm_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def measured(cmd: list[str], env: dict) -> tuple[float, float, dict[int, float], str, int]:
    """(wall s, client peak MB, {descendant pid: peak MB}, stdout, exit code)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    peaks: dict[int, float] = {}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            stack, seen = [proc.pid], set()
            while stack:
                p = stack.pop()
                if p in seen:
                    continue
                seen.add(p)
                peaks[p] = max(peaks.get(p, 0.0), _hwm_mb(p))
                stack += _children(p)
            time.sleep(0.05)
    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    done.set()
    watcher.join()
    client = peaks.pop(proc.pid, 0.0)
    if not any(peaks.values()):  # no process of its own: its exact peak (sampling may miss one just before exit;
        client = max(client, usage.ru_maxrss / 1024)  # with workers ru_maxrss would be the largest of them)
    return wall, client, {p: m for p, m in peaks.items() if m > 0}, out.decode(), proc.returncode


def doctor_run(folder: Path, workers: int | None, cache: Path, src: Path = ROOT / "src") -> dict:
    env = {**os.environ, "PYTHONPATH": str(src), "PERFLAB_CACHE": str(cache)}
    env.pop("DASK_SCHEDULER_ADDRESS", None)
    if workers is not None:
        env["PERFLAB_WORKERS"] = str(workers)
    wall, client, others, out, rc = measured([sys.executable, "-m", "perflab", "doctor", str(folder), "--json"], env)
    straggler = json.loads(out)["analyses"]["multigpu"]["straggler"] if rc == 0 else f"exit {rc}"
    big = sorted(others.values(), reverse=True)[: max(workers or 0, 1)] if others else []
    return {"wall_s": wall, "client_mb": client, "worker_mb": big, "straggler": straggler}


def single_run(folder: Path, code: str = SINGLE) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "PERFLAB_READER_PROCESSES": "1", "PERFLAB_WORKERS": "0",
           "PERFLAB_CACHE": tempfile.mkdtemp(prefix="perflab-cache-")}
    wall, client, _, out, rc = measured([sys.executable, "-c", code, str(folder)], env)
    return {"wall_s": wall, "client_mb": client, "straggler": out.strip() if rc == 0 else f"exit {rc}"}


def hta_run(folder: Path, python: Path = HTA_PY) -> dict:
    if not python.exists():
        return {"error": f"no {python} (python benchmarks/doctor_vs_hta.py --no-speed creates it)"}
    wall, client, others, _, rc = measured([str(python), "-c", HTA_LOAD, str(folder)], dict(os.environ))
    return {"wall_s": wall, "client_mb": client, "ok": rc == 0, "pool_mb": sorted(others.values(), reverse=True)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="8 ranks x 4 MB and 64 ranks x 1 MB")
    ap.add_argument("--ranks", type=int, nargs="+", default=None)
    ap.add_argument("--mb", type=float, default=None, help="MB of JSON per rank")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="local cluster sizes (0: in-process)")
    ap.add_argument("--single", action="store_true", help="also today's single-process path")
    ap.add_argument("--hta", action="store_true", help="also HTA 0.5.0 on every job (it loads every rank at once)")
    ap.add_argument("--hta-python", type=Path, default=HTA_PY, help="the python of HTA's virtual environment")
    ap.add_argument("--against", type=Path, default=None,
                    help="another checkout's src/ (say `git archive` of main): its doctor measured on the same jobs")
    ap.add_argument("--keep", type=Path, default=None, help="write the jobs here (default: a temporary folder)")
    a = ap.parse_args()
    jobs = ([(n, a.mb or 4.0) for n in a.ranks] if a.ranks else
            [(8, 4.0), (64, 1.0)] if a.quick else [(8, 40.0), (64, 40.0), (256, 40.0)])
    base = a.keep or Path(tempfile.mkdtemp(prefix="perflab-ranks-"))
    print(f"{'ranks':>5} {'GB':>6} {'engine':>19} {'wall s':>7} {'client MB':>9} "
          f"{'worker MB (peak each)':>24} straggler")
    for ranks, mb in jobs:
        folder = base / f"job-{ranks}x{mb:g}MB"
        info = json.loads((folder / "job.json").read_text()) if (folder / "job.json").exists() else None
        if info is None:
            info = write_job(folder / "ranks", ranks, mb, ranks - 1, 2)
            (folder / "job.json").write_text(json.dumps(info))
        gb, planted = info["bytes"] / 1e9, info["straggler"]
        for w, src in [(w, src) for w in a.workers for src in ([ROOT / "src"] + ([a.against] if a.against else []))]:
            r = doctor_run(folder / "ranks", w, Path(tempfile.mkdtemp(prefix="perflab-cache-")), src)
            label = ("in-process" if w == 0 else f"dask x{w}") + (" (base)" if src != ROOT / "src" else "")
            workers = " ".join(f"{m:.0f}" for m in r["worker_mb"]) if w else "-"
            found = "found" if r["straggler"] == planted else f"NOT found ({r['straggler']})"
            print(f"{ranks:5d} {gb:6.2f} {label:>19} {r['wall_s']:7.1f} {r['client_mb']:9.0f} {workers:>24} "
                  f"rank {planted} {found}", flush=True)
        if a.single:
            for code, label, what in ((SUMMARIES, "summaries (API)", "one rank at a time, no CLI"),
                                      (SINGLE, "one process (API)", "the old path: every rank in memory")):
                r = single_run(folder / "ranks", code)
                found = "found" if r["straggler"] == str(planted) else f"NOT found ({r['straggler']})"
                print(f"{ranks:5d} {gb:6.2f} {label:>19} {r['wall_s']:7.1f} {r['client_mb']:9.0f} {'-':>24} "
                      f"rank {planted} {found}  ({what})", flush=True)
        if a.hta:
            r = hta_run(folder / "ranks", a.hta_python)
            if "error" in r:
                print(f"{ranks:5d} {gb:6.2f} {'HTA 0.5.0':>19} {r['error']}")
            else:
                pool = " ".join(f"{m:.0f}" for m in r["pool_mb"][:4]) or "-"  # its parser's process pool
                print(f"{ranks:5d} {gb:6.2f} {'HTA 0.5.0':>19} {r['wall_s']:7.1f} {r['client_mb']:9.0f} {pool:>24} "
                      f"{'(loads, temporal breakdown, comm/comp overlap)' if r['ok'] else 'failed'}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
