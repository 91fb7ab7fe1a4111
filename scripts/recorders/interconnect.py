"""The interconnect lesson as a recorded sweep: one all-reduce bus-bandwidth sweep per NCCL setting.

    record.py interconnect --out DIR/interconnect.json [--gpus 2] [--budget-s 80] [--max-bytes B]
                           [--settings default,p2p_off,ring,tree]

Runs perflab.toolkit.bench.allreduce under torchrun (--nproc-per-node GPUS) once per setting, small to
large messages (4 KiB .. 256 MiB, x16), with only the environment changed:

    default     NCCL's own choice (NVLink peer-to-peer where the GPUs have it)
    p2p_off     NCCL_P2P_DISABLE=1: no peer-to-peer path; the data goes through host memory (SHM)
    ring        NCCL_ALGO=Ring
    tree        NCCL_ALGO=Tree

NCCL_NVLS_ENABLE stays 0. Each setting's NCCL_DEBUG=INFO lines that name the transport ("via P2P/...",
"via SHM/...") are kept beside its sweep, so the file itself shows which path the bytes took. Writes
one JSON (schema perflab.interconnect-sweep/1), read by perflab.analysis.multigpu.interconnect. A setting that
fails or runs out of budget is recorded with its error, never with numbers. Exit 0 when every setting ran.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

from recorders.common import child_env

from perflab.analysis.multigpu.interconnect import SCHEMA, SETTINGS  # noqa: E402  (common put this tree's src first)

_TRANSPORT = re.compile(r"via (P2P|SHM|NET|NVLS|COLLNET)\S*|NCCL version \S+|Using network \S+")


def run_setting(name: str, env_extra: dict, gpus: int, out: Path, timeout: float, max_bytes: int) -> dict:
    env = child_env(NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT", **env_extra)
    path = out.with_name(f"{out.stem}.{name}.json")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={gpus}",
           "--module", "perflab.toolkit.bench.allreduce", "--out", str(path), "--min-bytes", str(1 << 12),
           "--max-bytes", str(max_bytes), "--factor", "16", "--target-s", "0.02"]
    row: dict = {"env": env_extra, "command": " ".join([*(f"{k}={v}" for k, v in env_extra.items()), *cmd[1:]])}
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        lines = (p.stdout + p.stderr).splitlines()
        row["transport_lines"] = sorted({m.group(0) for line in lines for m in [_TRANSPORT.search(line)] if m})[:20]
        if p.returncode != 0 or not path.is_file():
            row["error"] = f"exit {p.returncode}: " + " | ".join(x for x in lines if "NCCL INFO" not in x)[-400:]
        else:
            row["sweep"] = json.loads(path.read_text())
            path.unlink()
    except subprocess.TimeoutExpired:
        row["error"] = f"timed out after {timeout:.0f} s"
    row["seconds"] = round(time.monotonic() - t0, 1)
    return row


def main(argv: list[str], prog: str = "record.py interconnect") -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--budget-s", type=float, default=80.0)
    ap.add_argument("--max-bytes", type=int, default=1 << 28, help="largest message (default 256 MiB)")
    ap.add_argument("--settings", default=",".join(SETTINGS), help="comma-separated subset of " + ", ".join(SETTINGS))
    args = ap.parse_args(argv)
    if args.out.exists():
        print(f"{args.out} exists; not overwriting", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    chosen = [x for x in args.settings.split(",") if x]
    unknown = [x for x in chosen if x not in SETTINGS]
    if unknown:
        print(f"unknown setting(s) {', '.join(unknown)}; known: {', '.join(SETTINGS)}", file=sys.stderr)
        return 2
    start = time.monotonic()
    doc: dict = {"schema": SCHEMA, "gpus": args.gpus, "settings": {}}
    for name in chosen:
        env_extra = SETTINGS[name]
        left = args.budget_s - (time.monotonic() - start)
        if left < 8:
            doc["settings"][name] = {"env": env_extra, "error": "not run: the budget was spent"}
            continue
        doc["settings"][name] = run_setting(name, env_extra, args.gpus, args.out, left, args.max_bytes)
        r = doc["settings"][name]
        print(f"{name}: {r.get('error') or 'ok'} ({r['seconds']} s) {r.get('transport_lines', [])[:3]}", flush=True)
    args.out.write_text(json.dumps(doc, indent=1))
    return 0 if all("sweep" in r for r in doc["settings"].values()) else 1
