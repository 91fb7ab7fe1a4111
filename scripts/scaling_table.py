#!/usr/bin/env python3
"""Print the markdown tables docs/multigpu/scaling.md quotes from recorded files: per GPU count of a
`perflab scale` scaling.json (step, speed-up, efficiency, exposed communication, all-reduce busbw of the
last-arriving rank), and per collective of a `perflab bench` collectives sweep its peak busbw.

    python3 scripts/scaling_table.py docs/multigpu/2026-11-27-h200x4-collectives-scaling/scale_strong/scaling.json ...
    python3 scripts/scaling_table.py --collectives docs/multigpu/2026-11-27-h200x4-collectives-scaling/collectives_4gpu.json
"""
from __future__ import annotations

import argparse
import json
import sys


def scaling_rows(doc: dict) -> list[str]:
    env = doc.get("environment", {})
    out = [f"`{doc['mode']}` scaling, {env.get('gpu')} (torch {env.get('torch')}, NCCL {env.get('nccl')}, "
           f"{str(env.get('date', ''))[:10]})", "",
           "| GPUs | step ms | speed-up | efficiency % | exposed comm % | rank spread % | all-reduce busbw GB/s |",
           "|---:|---:|---:|---:|---:|---:|---:|"]
    for p in doc["points"]:
        ar = (p.get("communication") or {}).get("by_kind", {}).get("all_reduce", {})
        bw = f"{ar['busbw_gbps']:.0f}" if ar.get("busbw_gbps") else "-"
        out.append(f"| {p['nproc']} | {p['step_ms']:.3f} | {p['speedup']:.2f} | {p['efficiency_pct']:.1f} | "
                   f"{p['exposed_comm_pct']:.1f} | {p['spread_pct']:.1f} | {bw} |")
    return out


def collective_rows(doc: dict) -> list[str]:
    out = [f"collectives on {doc['world_size']} x {doc['manifest']['gpu']} (NCCL {doc['manifest']['nccl']})", "",
           "| collective | peak busbw GB/s | at bytes | busbw at smallest size GB/s | time there µs |",
           "|---|---:|---:|---:|---:|"]
    for kind, s in doc["sweeps"].items():
        best = max(s["rows"], key=lambda r: r["busbw_gbps"])
        small = s["rows"][0]
        out.append(f"| {kind} | {best['busbw_gbps']:.0f} | {best['bytes']} | {small['busbw_gbps']:.3f} | "
                   f"{small['time_us']:.1f} |")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--collectives", action="append", default=[])
    a = ap.parse_args(argv)
    try:
        for f in a.files:
            print("\n".join(scaling_rows(json.load(open(f)))), end="\n\n")
        for f in a.collectives:
            print("\n".join(collective_rows(json.load(open(f)))), end="\n\n")
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
