"""with-stack: the slow workload.

A small encoder with ALiBi-style attention (a linear penalty on the distance between positions,
one slope per head) scores one sequence per step; the state cycles through a pool of inputs. The
model code is split into the usual helpers: attention bias, attention, MLP, encoder loop.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> tensor``;
``step`` returns the encoder output [seq, dim] (float32, on the device) of the next input.
"""
from __future__ import annotations

import math
import os

SIZE = {"seq": 256, "dim": 64, "heads": 4, "layers": 2, "max_dist": 128, "pool": 4}
SMOKE_SIZE = {"seq": 96, "dim": 32, "heads": 2, "layers": 2, "max_dist": 32, "pool": 4}


def _size(device: str) -> dict:
    if os.environ.get("PERFLAB_SMOKE", "0") != "0":
        return dict(SMOKE_SIZE)
    return dict(SIZE)


def build(device: str, seed: int) -> dict:
    """Weights and a pool of inputs, deterministic from ``seed``."""
    import torch

    size = _size(device)
    gen = torch.Generator().manual_seed(int(seed))
    d = size["dim"]

    def randn(*shape, std=1.0):
        return (torch.randn(*shape, generator=gen) * std).to(device)

    layers = [{"qkv": randn(3 * d, d, std=d ** -0.5), "out": randn(d, d, std=d ** -0.5),
               "up": randn(4 * d, d, std=d ** -0.5), "down": randn(d, 4 * d, std=(4 * d) ** -0.5)}
              for _ in range(size["layers"])]
    pool = [randn(size["seq"], d) for _ in range(size["pool"])]
    return {"size": size, "layers": layers, "pool": pool, "device": str(device), "i": 0}


def next_input(state: dict):
    x = state["pool"][state["i"] % len(state["pool"])]
    state["i"] += 1
    return x


def alibi_slopes(heads: int) -> list[float]:
    """The ALiBi head slopes: a geometric sequence 2^(-8/heads), 2^(-16/heads), ..."""
    return [2.0 ** (-8.0 * (h + 1) / heads) for h in range(heads)]


def relative_distances(n: int, max_dist: int) -> list[list[int]]:
    """|i - j| for every pair of positions, clipped at max_dist."""
    table = []
    for i in range(n):
        row = [0] * n
        for j in range(n):
            d = i - j
            if d < 0:
                d = -d
            if d > max_dist:
                d = max_dist
            row[j] = d
        table.append(row)
    return table


def attention_bias(size: dict, device: str):
    """[heads, seq, seq] additive attention bias: -slope_h * distance."""
    import torch

    slopes = torch.tensor(alibi_slopes(size["heads"]), dtype=torch.float32, device=device)
    dist = torch.tensor(relative_distances(size["seq"], size["max_dist"]), dtype=torch.float32, device=device)
    return -slopes[:, None, None] * dist


def attention(x, layer: dict, bias, heads: int):
    import torch.nn.functional as F

    n, d = x.shape
    q, k, v = F.linear(x, layer["qkv"]).view(n, 3, heads, d // heads).permute(1, 2, 0, 3)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(d // heads) + bias
    ctx = scores.softmax(dim=-1) @ v                                    # [heads, n, d/heads]
    return F.linear(ctx.permute(1, 0, 2).reshape(n, d), layer["out"])


def mlp(x, layer: dict):
    import torch.nn.functional as F

    return F.linear(F.gelu(F.linear(x, layer["up"])), layer["down"])


def encode(state: dict, x, bias):
    import torch.nn.functional as F

    heads = state["size"]["heads"]
    for layer in state["layers"]:
        x = x + attention(F.layer_norm(x, x.shape[-1:]), layer, bias, heads)
        x = x + mlp(F.layer_norm(x, x.shape[-1:]), layer)
    return x


def setup(device: str, seed: int) -> dict:
    return build(device, seed)


def step(state: dict):
    import torch

    x = next_input(state)
    with torch.no_grad():
        bias = attention_bias(state["size"], state["device"])
        return encode(state, x, bias)


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("pool",)
