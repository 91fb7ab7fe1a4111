"""launch-overhead: the slow workload.

A small transformer-style encoder: 24 blocks, hidden 256, 4 heads, 16 tokens, batch 1, fp32.
Layer norm, softmax and the tanh-GELU are written out with elementwise tensor ops, the way a lot
of research code is. One step is one forward pass of one request, run eagerly.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> tensor``
(the encoder output, [tokens, dim] fp32).
"""
from __future__ import annotations

import math

from perflab.workloads import sizes

# Full size (the GPU puzzle). On device "cpu", or with PERFLAB_SMOKE=1, SMOKE_SIZE is used so CI can
# run the workload in well under a second.
SIZE = {"layers": 24, "dim": 256, "heads": 4, "tokens": 16, "ffn": 1024}
SMOKE_SIZE = {"layers": 2, "dim": 64, "heads": 4, "tokens": 8, "ffn": 128}


def _build(device: str, seed: int):
    """Weights and input, deterministic from ``seed`` (drawn on the CPU, then moved)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    size = sizes.pick(device, SIZE, SMOKE_SIZE)
    gen = torch.Generator().manual_seed(int(seed))

    def randn(*shape, std=1.0):
        return (torch.randn(*shape, generator=gen) * std).to(device)

    class Linear(nn.Module):
        def __init__(self, n_in, n_out):
            super().__init__()
            self.weight = randn(n_out, n_in, std=1.0 / math.sqrt(n_in))
            self.bias = randn(n_out, std=0.02)

        def forward(self, x):
            return F.linear(x, self.weight, self.bias)

    class LayerNorm(nn.Module):
        """Layer norm by hand: 9 elementwise/reduction kernels instead of 1."""

        def __init__(self, dim, eps=1e-5):
            super().__init__()
            self.weight = 1.0 + randn(dim, std=0.02)
            self.bias = randn(dim, std=0.02)
            self.eps = eps

        def forward(self, x):
            mu = x.mean(-1, keepdim=True)
            xc = x - mu
            var = (xc * xc).mean(-1, keepdim=True)
            return xc * torch.rsqrt(var + self.eps) * self.weight + self.bias

    def gelu(x):
        """tanh-approximated GELU by hand: 9 kernels."""
        return 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))

    class Attention(nn.Module):
        def __init__(self, dim, heads, tokens):
            super().__init__()
            self.heads, self.hd = heads, dim // heads
            self.qkv = Linear(dim, 3 * dim)
            self.proj = Linear(dim, dim)
            self.scale = 1.0 / math.sqrt(self.hd)
            self.mask = torch.ones(tokens, tokens, dtype=torch.bool).triu(1).to(device)

        def forward(self, x):
            t, d = x.shape
            q, k, v = self.qkv(x).split(d, dim=-1)
            q = q.view(t, self.heads, self.hd).transpose(0, 1)
            k = k.view(t, self.heads, self.hd).transpose(0, 1)
            v = v.view(t, self.heads, self.hd).transpose(0, 1)
            att = (q @ k.transpose(-2, -1)) * self.scale
            att = att.masked_fill(self.mask, float("-inf"))
            att = att - att.amax(-1, keepdim=True)          # softmax by hand
            att = att.exp()
            att = att / att.sum(-1, keepdim=True)
            y = (att @ v).transpose(0, 1).reshape(t, d)
            return self.proj(y)

    class MLP(nn.Module):
        def __init__(self, dim, ffn):
            super().__init__()
            self.fc1 = Linear(dim, ffn)
            self.fc2 = Linear(ffn, dim)

        def forward(self, x):
            return self.fc2(gelu(self.fc1(x)))

    class Block(nn.Module):
        def __init__(self, s):
            super().__init__()
            self.ln1 = LayerNorm(s["dim"])
            self.attn = Attention(s["dim"], s["heads"], s["tokens"])
            self.ln2 = LayerNorm(s["dim"])
            self.mlp = MLP(s["dim"], s["ffn"])

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class Encoder(nn.Module):
        def __init__(self, s):
            super().__init__()
            self.blocks = nn.ModuleList(Block(s) for _ in range(s["layers"]))
            self.ln_f = LayerNorm(s["dim"])

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return self.ln_f(x)

    model = Encoder(size).eval()
    x = randn(size["tokens"], size["dim"])
    return model, x, size


def setup(device: str, seed: int) -> dict:
    model, x, size = _build(device, seed)
    return {"device": str(device), "model": model, "x": x, "size": size}


def step(state: dict):
    import torch

    with torch.no_grad():
        return state["model"](state["x"])


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("x",)
