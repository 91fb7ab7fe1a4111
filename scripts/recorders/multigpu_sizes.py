"""Time the multi-GPU puzzles' slow workload against their solution at other sizes (an experiment, not a check).

    record.py multigpu-sizes [--gpus 2] [--budget-s 540] [--no-gpu-tests] [--return-to DIR]

Runs this file under torchrun three times, with the NCCL streams at normal priority, at high priority
(TORCH_NCCL_HIGH_PRIORITY=1; 70, 73, 76) and with one hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=1; 70, 73),
then the gpu-marked multi-GPU tests: multigpu-sizes/{topology.txt, normal.json, high_priority.json,
one_queue.json, *.log, pytest.log}, packed into DIR with --return-to.

Under torchrun (`torchrun --standalone --nproc-per-node 2 scripts/recorders/multigpu_sizes.py [--only ID,...]
[--json OUT]`): for each puzzle and each candidate size, both variants are set up side by side on every rank and timed in
interleaved rounds (CUDA events, a barrier before each round; the job's step is the slowest rank's). Prints
one line per (puzzle, size): slow ms, fix ms, their ratio (median over rounds and its range). Rank 0 writes
the rows as JSON with --json. Set TORCH_NCCL_HIGH_PRIORITY=1 to put every NCCL stream at high priority, so a
run with and one without say what stream priority changes. On the CPU (gloo) it runs the smoke sizes only.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

CATALOG = Path(__file__).resolve().parents[2] / "src" / "perflab" / "catalog"
RUNS = (   # name, extra environment, puzzles (folder prefixes; none: all), seconds
    ("normal", {}, "", 200),
    ("high_priority", {"TORCH_NCCL_HIGH_PRIORITY": "1"}, "70-,73-,76-", 120),
    ("one_queue", {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, "70-,73-", 90),
)
GPU_TESTS = ("tests/gpu/test_multigpu_gpu.py", "tests/gpu/test_multigpu_puzzles_gpu.py")

# puzzle folder -> candidate sizes (the shipped SIZE first); "solution" keys patch the solution module too
VARIANTS = {
    "70-exposed-allreduce": [{}, {"hidden": 8192, "batch": 2048}, {"hidden": 8192, "batch": 1024},
                             {"hidden": 4096, "batch": 4096}],
    "73-nccl-timeline": [{}, {"hidden": 8192, "batch": 3072}, {"hidden": 8192, "batch": 6144},
                         {"hidden": 4096, "batch": 8192}],
    "74-pipeline-bubble": [{}, {"hidden": 8192}, {"hidden": 8192, "_m": 16}, {"_m": 16}],
    "76-ring-attention": [{}, {"positions": 4096}, {"positions": 8192, "batch": 1}],
    "77-expert-skew": [{}, {"hidden": 4096, "inner": 16384}, {"tokens": 32768}],
}


def patch(mods, change: dict) -> dict:
    saved = []
    for mod in mods:
        saved.append((mod, dict(mod.SIZE), getattr(mod, "MICRO_BATCHES", None)))
        mod.SIZE.update({k: v for k, v in change.items() if not k.startswith("_")})
    if "_m" in change:
        mods[1].MICRO_BATCHES = change["_m"]
    return saved


def restore(saved) -> None:
    for mod, size, m in saved:
        mod.SIZE.clear()
        mod.SIZE.update(size)
        if m is not None:
            mod.MICRO_BATCHES = m


def timed(mod, state, device, steps: int) -> float:
    import torch
    import torch.distributed as dist

    if device.startswith("cuda"):
        torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(steps):
        mod.step(state)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    ms = torch.tensor([(time.perf_counter() - t0) * 1e3 / steps], device=device)
    dist.all_reduce(ms, op=dist.ReduceOp.MAX)     # the job's step: the slowest rank's
    return float(ms)


def one(folder: str, change: dict, device: str, rounds: int) -> dict:
    import torch

    from perflab.puzzles.engine.runner import load_module

    slow = load_module(CATALOG / folder / "workload.py")      # a fresh module each: their SIZE is patched
    fix = load_module(CATALOG / folder / "solution.py")
    saved = patch([slow, fix], change)
    try:
        a, b = slow.setup(device, 0), fix.setup(device, 0)
        for _ in range(3):
            slow.step(a)
            fix.step(b)
        probe = timed(slow, a, device, 1)
        steps = max(2, min(20, int(60 / max(probe, 0.1))))        # about 60 ms per timing
        ratios, s_ms, f_ms = [], [], []
        for _ in range(rounds):
            s = timed(slow, a, device, steps)
            f = timed(fix, b, device, steps)
            s_ms.append(s)
            f_ms.append(f)
            ratios.append(s / f)
        del a, b
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
        return {"puzzle": folder, "change": change, "slow_ms": statistics.median(s_ms),
                "fix_ms": statistics.median(f_ms), "ratio": statistics.median(ratios),
                "ratio_min": min(ratios), "ratio_max": max(ratios), "steps": steps, "rounds": rounds}
    except Exception as exc:   # one size that does not fit must not stop the others
        return {"puzzle": folder, "change": change, "error": f"{type(exc).__name__}: {exc}"[:300]}
    finally:
        restore(saved)


def main(argv: list[str], prog: str = "record.py multigpu-sizes") -> int:
    from recorders.common import Session, child_env, describe_machine, work_folder

    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--budget-s", type=float, default=540)
    ap.add_argument("--no-gpu-tests", action="store_true", help="skip the gpu-marked multi-GPU tests")
    ap.add_argument("--return-to", type=Path, metavar="DIR", help="pack the results as DIR/multigpu-sizes.tgz")
    args = ap.parse_args(argv)
    run = Session(work_folder("multigpu-sizes"), args.budget_s)
    describe_machine(run.folder / "topology.txt", topology=True)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.gpus}",
                str(Path(__file__).resolve()), "--json"]
    for name, extra, only, want in RUNS:
        run.log(f"{name} ({only or 'every puzzle'})")
        run.run([*torchrun, run.folder / f"{name}.json", *(["--only", only] if only else [])], f"{name}.log", want,
                env=child_env(**extra))
    if not args.no_gpu_tests:
        run.log("gpu tests")
        run.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", *GPU_TESTS],
                "pytest.log", 150)
    run.give_back(args.return_to)
    return 0


def worker(argv: list[str]) -> int:
    """One pass under torchrun: every chosen puzzle at its candidate sizes; rank 0 prints and writes --json."""
    import torch
    import torch.distributed as dist

    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    gpu = torch.cuda.is_available()
    rank = int(os.environ.get("LOCAL_RANK", "0"))
    if gpu:
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if gpu else "gloo")
    device = f"cuda:{rank}" if gpu else "cpu"
    only = [s for s in args.only.split(",") if s]
    rows = []
    for folder, changes in VARIANTS.items():
        if only and not any(o in folder for o in only):
            continue
        for change in (changes if gpu else changes[:1]):
            row = one(folder, change, device, args.rounds)
            row["high_priority"] = os.environ.get("TORCH_NCCL_HIGH_PRIORITY", "0")
            rows.append(row)
            if dist.get_rank() == 0:
                if "error" in row:
                    print(f"{folder:24s} {json.dumps(change):44s} ERROR {row['error']}", flush=True)
                else:
                    print(f"{folder:24s} {json.dumps(change):44s} slow {row['slow_ms']:8.2f} ms  fix {row['fix_ms']:8.2f} ms"
                          f"  {row['ratio']:.2f}x ({row['ratio_min']:.2f}-{row['ratio_max']:.2f})", flush=True)
    if dist.get_rank() == 0 and args.json:
        meta = {"gpu": torch.cuda.get_device_name(0) if gpu else "cpu", "torch": torch.__version__,
                "nccl": ".".join(map(str, torch.cuda.nccl.version())) if gpu else None,
                "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "world": dist.get_world_size()}
        Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":   # under torchrun
    sys.exit(worker(sys.argv[1:]))
