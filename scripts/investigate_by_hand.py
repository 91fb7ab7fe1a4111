#!/usr/bin/env python3
"""Run, by hand, the levels a `perflab investigate --json` report names: the exact `record by hand` commands it
prints (perflab profile, perflab ncu for each profiled kernel, perflab memory record) and the doctor on what each
writes. For each investigation folder W/NAME (with its report W/NAME.json) writes W/NAME/by-hand/doctor-*.json
and W/NAME/by-hand/times.json; scripts/compare_investigate_by_hand.py then compares the numbers.

    python3 scripts/investigate_by_hand.py W NAME [NAME ...]
"""
from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path


def run(cmd: list[str], log: Path) -> tuple[int, float]:
    t = time.perf_counter()
    with open(log, "w") as fh:
        rc = subprocess.call(cmd, stdout=fh, stderr=subprocess.STDOUT)
    return rc, round(time.perf_counter() - t, 2)


def doctor(path: Path, out: Path) -> int:
    with open(out, "w") as fh:
        return subprocess.call(["perflab", "doctor", str(path), "--json"], stdout=fh, stderr=subprocess.DEVNULL)


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


def main() -> None:
    work = Path(sys.argv[1])
    for name in sys.argv[2:]:
        print(name, by_hand(work, name), flush=True)


if __name__ == "__main__":
    main()
