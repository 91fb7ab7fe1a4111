"""`perflab investigate` on three programs that need different levels, then each level by hand with the commands
the reports print, on the GPU machine (what tests/data/investigate/ holds of it).

    record.py investigate [--return-to DIR]

  host-bound  examples/tiny_gpt_inference.py                                 (level 1: system)
  kernel      puzzle 14-operator-hotspot's slow workload, one step per call  (level 2: its fp32 head GEMM)
  memory      examples/keep_outputs.py: every batch's logits kept on the GPU (level 3: near capacity)

Per program NAME: the investigation folder, NAME.json (the report), NAME.html, NAME.progress, NAME.txt (the
doctor on the folder); then by hand, the exact `record by hand` commands the report prints (perflab profile,
perflab ncu for the top kernel, perflab memory record) and the doctor on what each writes, in
NAME/by-hand/ (doctor-*.json, times.json); walls.jsonl and manifest.json. Folder investigate/.
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

from recorders.common import REPO, child_env, perflab, run_logged, work_folder

PROGRAMS = {   # name: (investigate's options, the program)
    "host-bound": ([], ["examples/tiny_gpt_inference.py"]),
    "kernel": (["--marker", "step"],
               ["examples/run_workload.py", "src/perflab/catalog/14-operator-hotspot/workload.py", "--steps", "20"]),
    "memory": ([], ["examples/keep_outputs.py"]),
}


def main(argv: list[str], prog: str = "record.py investigate") -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("--return-to", type=Path, metavar="DIR", help="pack the results as DIR/investigate.tgz")
    args = ap.parse_args(argv)
    work = work_folder("investigate")
    (work / "manifest.json").write_text(json.dumps(manifest(), indent=1), encoding="utf-8")
    walls = []
    for name, (options, program) in PROGRAMS.items():
        t0 = time.monotonic()
        with (work / f"{name}.json").open("w") as report, (work / f"{name}.progress").open("w") as progress:
            rc = subprocess.call(perflab("investigate", "--out", work / name, "--json", "--html", work / f"{name}.html",
                                         *options, "--", sys.executable, *program), stdout=report, stderr=progress,
                                 cwd=REPO, env=child_env())
        walls.append({"name": name, "rc": rc, "wall_s": round(time.monotonic() - t0, 3)})
        run_logged(perflab("doctor", work / name), work / f"{name}.txt", 300, tail=2)
        print(name, by_hand(work, name), flush=True)
    (work / "walls.jsonl").write_text("".join(json.dumps(w) + "\n" for w in walls), encoding="utf-8")
    manifest_doc = json.loads((work / "manifest.json").read_text())
    manifest_doc["walls"] = walls
    (work / "manifest.json").write_text(json.dumps(manifest_doc, indent=1), encoding="utf-8")
    if args.return_to:
        from recorders.common import pack

        pack(work, args.return_to)
    return 0


def manifest() -> dict:
    import torch

    from perflab.toolkit.ncu_runner import find_ncu

    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip().split(", ")
    ncu = find_ncu()
    version = subprocess.run([str(ncu), "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1:]
    return {"gpu": smi[0], "driver": smi[1] if len(smi) > 1 else None, "torch": torch.__version__,
            "cuda": torch.version.cuda, "python": platform.python_version(), "ncu": version[0] if version else str(ncu),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": "python3 scripts/record.py investigate"}


def run(cmd: list[str], log: Path) -> tuple[int, float]:
    if cmd and cmd[0] == "perflab":
        cmd = perflab(*cmd[1:])
    t = time.perf_counter()
    with open(log, "w") as fh:
        rc = subprocess.call(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=REPO, env=child_env())
    return rc, round(time.perf_counter() - t, 2)


def doctor(path: Path, out: Path) -> int:
    with open(out, "w") as fh:
        return subprocess.call(perflab("doctor", path, "--json"), stdout=fh, stderr=subprocess.DEVNULL, env=child_env())


def by_hand(work: Path, name: str) -> dict:
    report = json.loads((work / f"{name}.json").read_text())
    folder = Path(report["folder"])
    hand = folder / "by-hand"
    hand.mkdir(parents=True, exist_ok=True)
    times: dict = {}
    l1, l2, l3 = report["levels"]
    rc, times["level1"] = run(shlex.split(l1["commands"]["record"]), hand / "level1.log")
    trace = hand / "level1" / "trace.json.gz"
    times["level1_rc"] = rc
    if trace.exists():
        doctor(trace, hand / "doctor-level1.json")
    for k in l2.get("kernels") or []:
        if k.get("status") != "done" or k["rank"] > 1:  # the top kernel: the one the report leads with
            continue
        rc, times[f"ncu{k['rank']}"] = run(shlex.split(k["commands"]["record"]), hand / f"ncu-{k['rank']}.run.log")
        times[f"ncu{k['rank']}_rc"] = rc
        rep = hand / f"ncu-{k['rank']}.ncu-rep"
        if rep.exists():
            doctor(rep, hand / f"doctor-ncu-{k['rank']}.json")
    if l3["status"] == "done":
        rc, times["memory"] = run(shlex.split(l3["commands"]["record"]), hand / "memory.run.log")
        times["memory_rc"] = rc
        snap = hand / "memory.json.gz"
        if snap.exists():
            doctor(snap, hand / "doctor-memory.json")
    (hand / "times.json").write_text(json.dumps(times, indent=1))
    return times

