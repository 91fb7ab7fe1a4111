"""Batch scoring that keeps every batch's output on the GPU until the end: the memory a server runs out of.

    python examples/keep_outputs.py                        # CUDA: fills ~90 % of the GPU's memory
    perflab investigate -- python examples/keep_outputs.py

A linear scoring head turns each batch of embeddings into bf16 logits over a large vocabulary. The results are
appended to a list on the GPU and copied to the host only after the last batch, so every batch's logits stay
allocated until then: the allocator's reserved memory climbs by one batch's logits per step to near the
device's capacity (the batch count is sized from the device's memory, so it does so on any GPU). Copying each
batch to the host as it is made (or keeping only what is needed) keeps one batch alive instead of all of them.
Each call of the model is one top-level nn.Module call, which is what `perflab profile` counts as a step.
"""
from __future__ import annotations

import argparse

import torch
from torch import nn


class Scorer(nn.Module):
    def __init__(self, dim: int, vocab: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(x))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=8192, help="rows per batch")
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=65536)
    ap.add_argument("--fill", type=float, default=0.92, help="share of the device's memory the kept logits reach")
    ap.add_argument("--batches", type=int, default=0, help="batches to score [default: from --fill]")
    args = ap.parse_args()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    per_batch = args.rows * args.vocab * torch.finfo(dtype).bits // 8
    total = torch.cuda.get_device_properties(0).total_memory if device == "cuda" else 8 * per_batch
    batches = args.batches or max(4, int(args.fill * total / per_batch) - 2)
    torch.manual_seed(0)
    model = Scorer(args.dim, args.vocab).to(device, dtype).eval()
    outs = []
    with torch.inference_mode():
        for _ in range(batches):
            x = torch.randn(args.rows, args.dim, device=device, dtype=dtype)
            outs.append(model(x))                      # kept on the GPU until the end
        best = [o.argmax(-1).cpu() for o in outs]     # only now do the results leave the GPU
    print(f"keep_outputs: {batches} batches of {args.rows} rows on {device}, {batches * per_batch / 2**30:.1f} GiB of "
          f"logits kept; first argmax {best[0][:4].tolist()}")


if __name__ == "__main__":
    main()
