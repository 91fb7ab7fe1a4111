"""Run a puzzle variant's steps as a plain program, each step inside a `record_function` range named "step".

    python -m perflab.puzzles.evidence.marked_steps FILE [--device D] [--seed N] [--steps N]

What `perflab investigate --marker step` walks when a recording investigates a variant (evidence/investigation.py):
the same program as the learner's `python examples/run_workload.py FILE`.
"""
from __future__ import annotations

from perflab.puzzles.evidence import variant_program

MARKER = "step"


def main(argv: list[str] | None = None) -> int:
    ap = variant_program.parser(__doc__)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args(argv)

    import torch

    from perflab.puzzles.engine.runner import load_module, synchronize

    module = load_module(args.file)
    state = module.setup(args.device, args.seed)
    for _ in range(args.steps):
        with torch.profiler.record_function(MARKER):
            module.step(state)
    synchronize(args.device)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
