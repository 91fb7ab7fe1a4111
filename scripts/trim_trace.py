#!/usr/bin/env python3
"""Cut a Kineto trace down to a host-time window, keeping only complete events, for small test fixtures.

Host events (CPU ops, annotations, runtime calls, Python frames) are kept when they lie wholly inside
[--from-ms, --to-ms] (ms after the trace's first event). GPU events (kernels, copies, memsets, GPU
annotations) are kept when the runtime call that launched them (same correlation id) is kept, wherever the
GPU ran them: a GPU far behind its host keeps its work. Flow events follow the events they link; metadata
and the trace's header are kept as they are.

    python3 scripts/trim_trace.py IN.json.gz OUT.json.gz --from-ms 0 --to-ms 400
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}


def _open(path: Path, mode: str):
    return gzip.open(path, mode + "t") if path.suffix == ".gz" else open(path, mode)


def read_trace(path: Path) -> dict:
    with _open(path, "r") as f:
        return json.load(f)


def write_trace(path: Path, doc: dict) -> None:
    with _open(path, "w") as f:
        json.dump(doc, f, separators=(",", ":"))


def trim(doc: dict, lo_ms: float, hi_ms: float) -> dict:
    events = doc["traceEvents"]
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    origin = min(float(e["ts"]) for e in timed)
    lo, hi = origin + 1e3 * lo_ms, origin + 1e3 * hi_ms
    keep, launched = [], set()
    for e in events:
        if e.get("ph") != "X" or e.get("cat") in GPU_CATS:
            continue
        ts, dur = float(e["ts"]), float(e.get("dur", 0))
        if lo <= ts and ts + dur <= hi:
            keep.append(e)
            if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
                launched.add(e["args"]["correlation"])
    gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") in GPU_CATS
           and e.get("args", {}).get("correlation") in launched]
    kept_ids = {e["args"]["correlation"] for e in gpu} | launched
    flows = [e for e in events if e.get("ph") in ("s", "f") and e.get("id") in kept_ids]
    meta = [e for e in events if e.get("ph") == "M"]
    out = {k: v for k, v in doc.items() if k != "traceEvents"}
    out["traceEvents"] = meta + sorted(keep + gpu, key=lambda e: float(e["ts"])) + flows
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    ap.add_argument("--from-ms", type=float, default=0.0)
    ap.add_argument("--to-ms", type=float, required=True)
    ap.add_argument("--force", action="store_true")
    a = ap.parse_args(argv)
    if a.dst.exists() and not a.force or a.dst.resolve() == a.src.resolve():
        print(f"{a.dst} exists (or is the input): pass --force to replace it", file=sys.stderr)
        return 2
    doc = read_trace(a.src)
    out = trim(doc, a.from_ms, a.to_ms)
    write_trace(a.dst, out)
    print(f"{a.dst}: {len(out['traceEvents'])} of {len(doc['traceEvents'])} events")
    return 0


if __name__ == "__main__":
    sys.exit(main())
