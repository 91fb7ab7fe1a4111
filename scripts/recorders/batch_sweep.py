"""Record a puzzle's batch-size sweep on the GPU machine: artifacts/sweep.json and sweep.png.

    record.py batch-sweep [ID] [--out DIR] [--max-batch N] [--device cpu]

The puzzle's workload.py must define ``forward(state, x)`` and ``make_batch(state, batch, seed)``
(catalog/13-batch-size-knee). Writes into the puzzle's artifacts folder, or DIR/<NN-slug>/artifacts/
with --out (next to what `record.py puzzle --out DIR` writes there). Exit 0 on success, 2 on bad input.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import recorders.common  # noqa: F401  (this tree's src first)
from perflab.errors import PerflabError  # noqa: E402
from perflab.puzzles.engine import catalog, runner  # noqa: E402
from perflab.toolkit import batch_sweep  # noqa: E402


def main(argv: list[str], prog: str = "record.py batch-sweep") -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("id", nargs="?", default="batch-size-knee")
    ap.add_argument("--out", type=Path, help="write DIR/<NN-slug>/artifacts/ instead of the catalog folder")
    ap.add_argument("--max-batch", type=int, default=2048)
    ap.add_argument("--device", help="run here on this device (e.g. cpu for a smoke test) instead of the GPU")
    args = ap.parse_args(argv)
    command = "python3 scripts/record.py batch-sweep " + " ".join(argv)
    try:
        puzzle = catalog.get(args.id)
        device = args.device or runner.require_device(puzzle, "sweeping")
        module = runner.load_module(puzzle.file("slow"))
        for fn in ("forward", "make_batch"):
            if not callable(getattr(module, fn, None)):
                raise PerflabError(f"{puzzle.id}: workload.py has no {fn}() for the sweep")
        state = module.setup(device, 0)
        batches = [2 ** i for i in range(0, args.max_batch.bit_length()) if 2 ** i <= args.max_batch]
        import torch

        with torch.no_grad():
            points = batch_sweep.sweep(lambda x: module.forward(state, x),
                                       lambda b: module.make_batch(state, b, seed=b), batches, device=device)
        result = {"schema": batch_sweep.SCHEMA, "puzzle": puzzle.id, "knee_fraction": batch_sweep.KNEE_FRACTION,
                  "points": points, "manifest": runner.environment(command.strip(), device)}
        k = batch_sweep.knee(points)
        dest = (args.out / puzzle.folder.name / "artifacts") if args.out else puzzle.artifacts
        dest.mkdir(parents=True, exist_ok=True)
        runner.write_json(dest / "sweep.json", result)
        gpu = result["manifest"].get("gpu") or device
        batch_sweep.plot(result, dest / "sweep.png", title=f"{puzzle.id} on {gpu}")
    except PerflabError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    for p in points:
        print(f"batch {p['batch']:5d}  latency {p['latency_ms']:8.3f} ms  per call {p['forward_ms']:8.3f} ms  "
              f"throughput {p['throughput']:12.0f}/s")
    print(f"knee: batch {k['batch']} ({k['throughput']:.0f}/s); wrote {dest}/sweep.json, sweep.png")
    print(json.dumps({"knee": k}))
    return 0

