#!/usr/bin/env python3
"""perflab's recording tool: what the repository ships from a GPU machine, recorded there in one command.

    python3 scripts/record.py SUBCOMMAND [ARGS...]        (python3 scripts/record.py SUBCOMMAND --help)

On a GPU machine first `source scripts/device_env.sh` (the wheels it lacks, carried as .whl: made here by
`bash scripts/fetch_device_wheels.sh`). Each subcommand works in a folder of its own and, given
`--return-to DIR` (the machine's output folder, $OUT), packs it there as one .tgz to copy back.
"""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# subcommand -> (module of scripts/recorders, its entry point, what it does)
SUBCOMMANDS = {
    "puzzle": ("puzzles", "record", "record puzzles end to end: profiles, fix check, artifacts"),
    "catalog-check": ("puzzles", "check", "check every puzzle's fix checker (solution passes, starter fails)"),
    "catalog-summary": ("catalog_summary", "main", "the recorded or live fix checks as one table (no GPU)"),
    "tune-size": ("tune_size", "main", "try values of one SIZE key of a puzzle before recording it"),
    "batch-sweep": ("batch_sweep", "main", "a puzzle's batch-size sweep (sweep.json, sweep.png)"),
    "fp8-configs": ("fp8_configs", "main", "the fp8 weight-only configurations, one process each"),
    "gemlite-configs": ("gemlite_configs", "main", "which GemLite kernel and config runs per batch size"),
    "multigpu-puzzles": ("multigpu", "puzzles", "record the multi-GPU puzzles and the doctor rank by rank"),
    "multigpu": ("multigpu", "measure", "topology, collective sweeps, scaling and the DDP example's traces"),
    "multigpu-doctor": ("multigpu_doctor", "main", "the doctor rank by rank on recorded multi-GPU puzzles"),
    "multigpu-sizes": ("multigpu_sizes", "main", "the multi-GPU puzzles' slow vs fix at other sizes"),
    "interconnect": ("interconnect", "main", "all-reduce bus bandwidth under each NCCL setting"),
    "ncu-fixtures": ("ncu_fixtures", "main", "Nsight Compute reports of fixtures/kernels"),
    "gain-fixtures": ("gain_fixtures", "main", "the gain model's kernels under ncu and the two-stream offload snapshot"),
    "stacks": ("stacks", "fixtures", "traces of compiled, graphed and HF programs; two kernels at their roof"),
    "graph-capture": ("stacks", "graph_capture", "traces whose window holds a CUDA graph's capture"),
    "stack-checks": ("stacks", "checks", "profile and investigate on compiled and graphed programs"),
    "investigate": ("investigate", "main", "perflab investigate on three programs, then each level by hand"),
    "sol-traces": ("sol_traces", "main", "traces that check the doctor's speed-of-light reasoning"),
    "healthy-gemm": ("healthy_gemm", "main", "a healthy reference trace: back-to-back bf16 GEMMs"),
    "hta-overlap": ("hta_overlap", "main", "HTA's comm/comp overlap on the peer traces (no GPU)"),
}


def usage() -> str:
    width = max(map(len, SUBCOMMANDS))
    rows = "\n".join(f"  {name:<{width}}  {what}" for name, (_, _, what) in SUBCOMMANDS.items())
    return f"{__doc__}\nsubcommands:\n{rows}\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        print(f"record.py: error: no subcommand {name!r} (python3 scripts/record.py --help lists them)",
              file=sys.stderr)
        return 2
    module, entry, _ = SUBCOMMANDS[name]
    run = getattr(importlib.import_module(f"recorders.{module}"), entry)
    return run(rest, prog=f"record.py {name}")


if __name__ == "__main__":
    sys.exit(main())
