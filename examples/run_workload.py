"""Run a workload file (a puzzle's workload.py, starter.py or solution.py: `setup(device, seed)` and
`step(state)`) as a plain program: set-up, then N steps, each inside a `record_function` range named "step".

    python examples/run_workload.py src/perflab/catalog/14-operator-hotspot/workload.py --steps 30
    perflab investigate --marker step -- python examples/run_workload.py PATH/TO/workload.py

With --marker step, `perflab profile` and `perflab investigate` count one step per call of step() (without it a
workload that calls no nn.Module would be cut into time slices). `perflab show ID` names a puzzle's folder.
"""
from __future__ import annotations

import argparse
import importlib.util
import time
from pathlib import Path


def load(path: Path):
    spec = importlib.util.spec_from_file_location(f"workload_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"run_workload: cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for fn in ("setup", "step"):
        if not callable(getattr(module, fn, None)):
            raise SystemExit(f"run_workload: {path} defines no {fn}(): not a workload file")
    return module


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", type=Path)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="")
    args = ap.parse_args()

    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    module = load(args.file)
    state = module.setup(device, args.seed)
    t0 = time.perf_counter()
    for _ in range(args.steps):
        with torch.profiler.record_function("step"):
            module.step(state)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print(f"run_workload: {args.steps} steps of {args.file} on {device}: {dt / args.steps * 1e3:.3f} ms per step")


if __name__ == "__main__":
    main()
