"""A small GPT-style language model decoding a batch, built from torch.nn (no downloads).

    python examples/tiny_gpt_inference.py                   # CUDA if present, else CPU
    perflab profile -- python examples/tiny_gpt_inference.py

Greedy batch decode with a preallocated KV cache: one forward for the prompt (prefill), then one
forward per new token. Each forward is one top-level module call, which is what `perflab profile`
counts as a step. Random weights: the tokens are meaningless, the work is real.
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, max_len: int):
        super().__init__()
        self.heads, self.head_dim, self.max_len = heads, dim // heads, max_len
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)
        self.cache: tuple[torch.Tensor, torch.Tensor] | None = None

    def reset_cache(self, batch: int, device, dtype) -> None:
        shape = (batch, self.heads, self.max_len, self.head_dim)
        self.cache = (torch.zeros(shape, device=device, dtype=dtype), torch.zeros(shape, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor, pos: int) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        k_cache, v_cache = self.cache
        k_cache[:, :, pos:pos + t] = k
        v_cache[:, :, pos:pos + t] = v
        # The prompt attends causally; a single new token attends to everything cached so far.
        y = F.scaled_dot_product_attention(q, k_cache[:, :, :pos + t], v_cache[:, :, :pos + t], is_causal=t > 1)
        return self.out(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, max_len: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, max_len)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor, pos: int) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), pos)
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int, dim: int, layers: int, heads: int, max_len: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_len, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, max_len) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied embeddings, as in GPT-2

    def reset_cache(self, batch: int) -> None:
        p = self.tok.weight
        for block in self.blocks:
            block.attn.reset_cache(batch, p.device, p.dtype)

    def forward(self, idx: torch.Tensor, pos: int) -> torch.Tensor:
        positions = torch.arange(pos, pos + idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(positions)
        for block in self.blocks:
            x = block(x, pos)
        return self.head(self.ln(x[:, -1]))  # logits of the last position only


@torch.inference_mode()
def generate(model: TinyGPT, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    model.reset_cache(prompt.shape[0])
    logits = model(prompt, 0)
    out = [logits.argmax(-1, keepdim=True)]
    for i in range(new_tokens - 1):
        logits = model(out[-1], prompt.shape[1] + i)
        out.append(logits.argmax(-1, keepdim=True))
    return torch.cat(out, dim=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--rounds", type=int, default=1, help="decode the batch this many times")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()

    torch.manual_seed(0)
    dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    max_len = args.prompt + args.new_tokens
    model = TinyGPT(args.vocab, args.dim, args.layers, args.heads, max_len).to(args.device, dtype).eval()
    prompt = torch.randint(args.vocab, (args.batch, args.prompt), device=args.device)

    t0 = time.perf_counter()
    for _ in range(args.rounds):
        tokens = generate(model, prompt, args.new_tokens)
    tokens = tokens.cpu()  # waits for the GPU, so the clock below is honest
    dt = time.perf_counter() - t0
    n = args.batch * args.new_tokens * args.rounds
    params = sum(p.numel() for p in model.parameters())
    assert tokens.shape == (args.batch, args.new_tokens)
    print(f"tiny-gpt: {params / 1e6:.1f}M params on {args.device}, decoded {n} tokens in {dt:.3f} s "
          f"({n / dt:,.0f} tok/s)")


if __name__ == "__main__":
    main()
