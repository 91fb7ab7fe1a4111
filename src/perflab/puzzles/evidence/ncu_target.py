"""The program Nsight Compute profiles for a puzzle variant (run by ncu_evidence, never by hand):

    python3 -m perflab.puzzles.evidence.ncu_target FILE --device cuda --seed N --warmup W

Loads the variant file, builds its state, runs W unprofiled warm-up steps (compilation, caches),
then one step between cudaProfilerStart/Stop: ncu runs with `--profile-from-start off`, so only
the kernels of that step are profiled. Exit 0 and "ok" on stdout, 1 with one line on failure.
"""
from __future__ import annotations

import sys

from perflab.puzzles.evidence import variant_program


def main(argv: list[str] | None = None) -> int:
    ap = variant_program.parser(__doc__)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args(argv)
    import torch


    from perflab.errors import PerflabError
    from perflab.puzzles.engine import runner

    try:
        module = runner.load_module(args.file)
        state = module.setup(args.device, args.seed)
        for _ in range(args.warmup):
            module.step(state)
        runner.synchronize(args.device)
        profiling = args.device.startswith("cuda")
        if profiling:
            torch.cuda.profiler.start()
        module.step(state)
        runner.synchronize(args.device)
        if profiling:
            torch.cuda.profiler.stop()
    except PerflabError as exc:
        print(f"ncu_target: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - the learner's file: one line
        print(f"ncu_target: {args.file} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
