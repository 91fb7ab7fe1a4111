#!/usr/bin/env python3
"""`perflab investigate` before and after level 2 in one pass, against the program alone, in one run (needs a GPU and
Nsight Compute: scripts/gpu_benchmark_investigate_and_ranks.sh runs it on the device machine).

    python benchmarks/investigate_one_pass.py --out /tmp/inv-bench --budget-s 260
    python benchmarks/investigate_one_pass.py --out /tmp/inv-bench --programs graphed-decode

Per program (the test suite's GPU checks' programs: tests/gpu/, examples/stacks/), each a fresh process with its own
empty torch.compile and Triton caches (compile included, as a user's first run):
  alone   the program itself (its own time: warm-up and compile included)
  before  `perflab investigate --ncu-runs per-kernel --ncu-set full --memory-run separate`: the earlier way, a run
          of the program under Nsight Compute per chosen kernel with the full set, level 3 in a run of its own
  after   `perflab investigate` as shipped: one ncu run for all chosen kernels with the doctor set, level 3's
          history from level 1's run
Printed: the wall times with the level split, the ratios to the program alone (the target: after <= 2 x alone +
the replays of the chosen launches), each level's expected time against its actual one (the progress line's
estimate), and whether before and after reach the same verdicts (headline, each level's finding, each kernel's).
Everything goes to OUT/results.json and the walks' folders under OUT/walks/ (ncu reports left out by the script).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
# name -> (program argv from the repo root, investigate options, seconds alone + before + after are expected to take:
# from the H100 walks of docs/stacks/2026-11-27-h100, scaled to these sizes)
PROGRAMS = {
    "compiled-block": ([PY, "examples/stacks/compiled_block.py", "--as", "module", "--mode", "reduce-overhead",
                        "--iters", "400"], ["--kernels", "2"], 110),
    "keep-outputs": ([PY, "examples/keep_outputs.py"], [], 75),          # level 3: its history from level 1's run
    "graphed-decode": ([PY, "examples/stacks/graphed_decode.py", "--steps", "200"], ["--kernels", "2"], 80),
    "operator-hotspot": ([PY, "examples/run_workload.py", "src/perflab/catalog/14-operator-hotspot/workload.py",
                          "--steps", "20"], ["--marker", "step"], 65),
    "hf-generate": ([PY, "examples/stacks/hf_generate.py", "--cache", "static", "--compile", "--calls", "8"], [], 250),
}
OLD = ["--ncu-runs", "per-kernel", "--ncu-set", "full", "--memory-run", "separate"]


def fresh_env() -> dict[str, str]:
    env = dict(os.environ)
    for var in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        env[var] = tempfile.mkdtemp(prefix=var.lower() + "-")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    return env


def timed(cmd: list[str], log: Path, timeout_s: float) -> tuple[float, int]:
    """Wall seconds and exit status; past the limit the command gets SIGINT (perflab then stops the program and
    ncu it runs, each in a process group of its own), then SIGKILL."""
    import signal

    t0 = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=fresh_env(), stdout=fh, stderr=subprocess.STDOUT)
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            rc = 124
    return round(time.perf_counter() - t0, 2), rc


def walk(name: str, way: str, prog: list[str], opts: list[str], out: Path, timeout_s: float) -> dict:
    folder = out / "walks" / f"{name}-{way}"
    shutil.rmtree(folder, ignore_errors=True)
    cmd = [PY, "-m", "perflab", "investigate", "--json", "--out", str(folder), *opts,
           *(OLD if way == "before" else []), "--", *prog]
    wall, rc = timed(cmd, out / "walks" / f"{name}-{way}.progress.log", timeout_s)
    row = {"wall_s": wall, "rc": rc}
    rec_path = folder / "investigation.json"
    if rec_path.exists():
        rec = json.loads(rec_path.read_text())
        lv = rec.get("levels", {})
        row["levels"] = {n: {k: lv.get(n, {}).get(k) for k in ("status", "took_s", "program_s", "expected_s")}
                         for n in ("1", "2", "3")}
        l2 = lv.get("2", {})
        runs = l2.get("passes") or l2.get("kernels") or []
        row["ncu_runs"] = len(runs)
        row["ncu_passes_per_launch"] = [r.get("passes_per_launch") for r in runs]
        row["level3_from_level1"] = bool(lv.get("3", {}).get("from_level1"))
    try:
        report = subprocess.run([PY, "-m", "perflab", "doctor", str(folder), "--json"], cwd=ROOT, env=fresh_env(),
                                capture_output=True, text=True, timeout=300)
        row["verdicts"] = verdicts(json.loads(report.stdout))
    except (ValueError, subprocess.TimeoutExpired) as exc:
        row["verdicts"] = {"error": str(exc)[:200]}
    for rep in folder.glob("*.ncu-rep"):   # the raw-page CSV beside it holds what the doctor reads
        rep.unlink()
    return row


def verdicts(d: dict) -> dict:
    """What a walk concluded: the headline, each level's finding, each profiled kernel's finding."""
    h = d["headline"]
    out = {"headline": [h.get("level"), h.get("scope"), h.get("function")]}
    for lv in d["levels"]:
        f = lv.get("finding") or {}
        out[f"level{lv['level']}"] = [lv.get("status"), f.get("id"), f.get("severity")]
    out["kernels"] = [[k.get("function"), (k.get("finding") or {}).get("id"),
                       (k.get("profiled") or {}).get("matches_chosen")] for k in d["levels"][1].get("kernels") or []]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--programs", nargs="*", default=list(PROGRAMS), choices=list(PROGRAMS))
    ap.add_argument("--budget-s", type=float, default=None, help="skip a program that would not finish in what is left")
    ap.add_argument("--program", action="append", default=[], metavar="NAME=SCRIPT",
                    help="also this Python script (run with this Python), after the named programs")
    a = ap.parse_args()
    for extra in a.program:
        name, _, script = extra.partition("=")
        PROGRAMS[name] = ([PY, script], [], 0)
        a.programs.append(name)
    (a.out / "walks").mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    results: dict = {"programs": {}, "skipped": []}
    print(f"{'program':>16} {'alone s':>7} {'before s (L1/L2/L3)':>24} {'after s (L1/L2/L3)':>24} "
          f"{'before/alone':>12} {'after/alone':>11} {'ncu runs b/a':>12}  verdicts", flush=True)
    for name in a.programs:
        prog, opts, cost = PROGRAMS[name]
        left = (a.budget_s - (time.perf_counter() - t0)) if a.budget_s else float("inf")
        if cost > left:
            results["skipped"].append(f"{name}: ~{cost} s expected, {left:.0f} s left")
            print(f"{name:>16} skipped: ~{cost} s expected, {left:.0f} s of the budget left", flush=True)
            continue
        limit = max(60.0, min(left, 400.0))
        alone, rc = timed(prog, a.out / "walks" / f"{name}-alone.log", limit)
        r = {"program": prog, "options": opts, "alone_s": alone, "alone_rc": rc,
             "before": walk(name, "before", prog, opts, a.out, limit),
             "after": walk(name, "after", prog, opts, a.out, limit)}
        r["same_verdicts"] = r["before"].get("verdicts") == r["after"].get("verdicts")
        results["programs"][name] = r
        (a.out / "results.json").write_text(json.dumps(results, indent=1))

        def split(w: dict) -> str:
            lv = w.get("levels") or {}
            parts = "/".join(f"{(lv.get(n) or {}).get('took_s') or 0:.0f}" for n in ("1", "2", "3"))
            return f"{w['wall_s']:.0f} ({parts})"

        print(f"{name:>16} {alone:7.0f} {split(r['before']):>24} {split(r['after']):>24} "
              f"{r['before']['wall_s'] / alone:11.2f}x {r['after']['wall_s'] / alone:10.2f}x "
              f"{r['before'].get('ncu_runs', 0):>5}/{r['after'].get('ncu_runs', 0):<6} "
              f"{'same' if r['same_verdicts'] else 'DIFFER'}", flush=True)
        for way in ("before", "after"):
            lv = r[way].get("levels") or {}
            est = ", ".join(f"L{n} expected {lv[n]['expected_s']:.0f} s, took {lv[n]['took_s'] or 0:.0f} s"
                            for n in ("2",) if (lv.get(n) or {}).get("expected_s") is not None)
            print(f"{'':>16} {way}: passes per launch {r[way].get('ncu_passes_per_launch')}; {est}; level 3 "
                  f"{'from level 1' if r[way].get('level3_from_level1') else 'own run or none'}", flush=True)
        if not r["same_verdicts"]:
            print(f"{'':>16} before {json.dumps(r['before'].get('verdicts'))}\n{'':>16} after  "
                  f"{json.dumps(r['after'].get('verdicts'))}", flush=True)
    (a.out / "results.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
