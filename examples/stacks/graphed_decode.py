"""A decode step captured once in a CUDA graph and replayed, as serving engines do.

    python examples/stacks/graphed_decode.py
    perflab profile -- python examples/stacks/graphed_decode.py

A small Llama-shaped model (perflab.workloads.llama) decodes one token per row of a batch; the
forward is captured with torch.cuda.graph and each step is one replay plus the sampling. There is
no top-level nn.Module call in the loop: the only launches are graph replays.
"""
from __future__ import annotations

import argparse
import time

import torch


def main() -> None:
    from perflab.workloads import llama
    from perflab.workloads.cuda_graph import capture

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--batch", type=int, default=16)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("graphed_decode needs a CUDA GPU (CUDA graphs)")
    model = llama.build(llama.LLAMA_3_2_1B, "cuda", 0, batch=args.batch, max_seq=args.steps + 8)
    tokens = torch.zeros(args.batch, 1, dtype=torch.long, device="cuda")
    positions = torch.zeros(args.batch, 1, dtype=torch.long, device="cuda")
    with torch.inference_mode():
        graph, logits = capture(lambda: model.forward_slots(tokens, positions))
        positions.zero_()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            graph.replay()
            tokens.copy_(logits.argmax(-1, keepdim=True))
            positions.add_(1)
        torch.cuda.synchronize()
    print(f"graphed decode: {(time.perf_counter() - t0) / args.steps * 1e3:.3f} ms per step, batch {args.batch}")


if __name__ == "__main__":
    main()
