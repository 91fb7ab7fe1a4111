"""A Llama-style decoder block (RMSNorm, causal SDPA, SwiGLU) under torch.compile, called in a loop.

    python examples/stacks/compiled_block.py                       # compiled function, default mode
    python examples/stacks/compiled_block.py --as module --mode reduce-overhead
    python examples/stacks/compiled_block.py --mode eager          # the same block without compile
    perflab profile -- python examples/stacks/compiled_block.py

What inference engineers run: `f = torch.compile(block)` on a plain function (no nn.Module call at
the top level) or on a module, with the default, `reduce-overhead` (CUDA graphs) or `max-autotune`
mode. The first calls compile (and autotune); the steady state comes after. Random weights.
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps).to(x.dtype) * w


def block(x: torch.Tensor, p: dict[str, torch.Tensor], heads: int) -> torch.Tensor:
    b, t, d = x.shape
    h = rms_norm(x, p["ln1"])
    q, k, v = (h @ p["wqkv"]).view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    x = x + y.transpose(1, 2).reshape(b, t, d) @ p["wo"]
    h = rms_norm(x, p["ln2"])
    gate_up = h @ p["w13"]
    gate, up = gate_up.chunk(2, dim=-1)
    return x + (F.silu(gate) * up) @ p["w2"]


class Block(nn.Module):
    def __init__(self, params: dict[str, torch.Tensor], heads: int):
        super().__init__()
        self.p = nn.ParameterDict({k: nn.Parameter(v, requires_grad=False) for k, v in params.items()})
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return block(x, dict(self.p), self.heads)


def make_params(dim: int, ffn: int, device: str, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    g = torch.Generator(device="cpu").manual_seed(0)

    def w(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) / shape[0] ** 0.5).to(device=device, dtype=dtype)

    return {"ln1": torch.ones(dim, device=device, dtype=dtype), "ln2": torch.ones(dim, device=device, dtype=dtype),
            "wqkv": w(dim, 3 * dim), "wo": w(dim, dim), "w13": w(dim, 2 * ffn), "w2": w(ffn, dim)}


def build(kind: str, mode: str, device: str, dim: int, ffn: int, heads: int):
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    params = make_params(dim, ffn, device, dtype)
    if kind == "module":
        fn = Block(params, heads)
    else:
        def fn(x):
            return block(x, params, heads)
    if mode != "eager":
        fn = torch.compile(fn, mode=None if mode == "default" else mode)
    return fn, dtype


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--as", dest="kind", choices=["function", "module"], default="function")
    ap.add_argument("--mode", choices=["default", "reduce-overhead", "max-autotune", "eager"], default="default")
    ap.add_argument("--iters", type=int, default=300, help="calls after the first (compiling) one")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dim, ffn, heads = (2048, 5632, 16) if device == "cuda" else (64, 176, 4)
    seq = args.seq if device == "cuda" else 16
    fn, dtype = build(args.kind, args.mode, device, dim, ffn, heads)
    x = torch.randn(args.batch, seq, dim, device=device, dtype=dtype)
    with torch.inference_mode():
        t0 = time.perf_counter()
        y = fn(x)
        if device == "cuda":
            torch.cuda.synchronize()
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(args.iters):
            y = fn(x)
        if device == "cuda":
            torch.cuda.synchronize()
        steady = (time.perf_counter() - t0) / max(args.iters, 1)
    print(f"{args.kind} {args.mode}: first call {first:.2f} s, then {steady * 1e3:.3f} ms per call "
          f"({args.iters} calls), checksum {float(y.float().sum()):.4g}")


if __name__ == "__main__":
    main()
