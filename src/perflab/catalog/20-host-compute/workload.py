"""host-compute: the slow workload.

A tiny request classifier. Every step a new batch of raw texts arrives (the state cycles through a
pool of batches); each text becomes a bag of hashed character trigrams (counts over ``buckets``
hash buckets), and a three-layer MLP (hidden 8,192 on the GPU, 512 on the CPU) scores the batch on
the device. The featurizer is a plain Python
loop over every character of every text.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> tensor``;
``step`` returns the logits [batch, classes] (float32, on the device) of the next batch in the pool.
"""
from __future__ import annotations

import os

SIZE = {"batch": 256, "chars": 192, "buckets": 4096, "hidden": 8192, "classes": 16, "pool": 4}
CPU_HIDDEN = 512        # on device "cpu" the same MLP, narrower (the GPU box serves the wide one)
SMOKE_SIZE = {"batch": 64, "chars": 96, "buckets": 1024, "hidden": 128, "classes": 16, "pool": 4}
ALPHABET = "abcdefghijklmnopqrstuvwxyz     "     # lowercase ASCII and spaces: one byte per character
MULT = 31


def _size(device: str) -> dict:
    if os.environ.get("PERFLAB_SMOKE", "0") != "0":
        return dict(SMOKE_SIZE)
    return dict(SIZE, hidden=CPU_HIDDEN) if str(device).startswith("cpu") else dict(SIZE)


def _texts(rng, n: int, chars: int) -> list[str]:
    """n texts of varying length (chars/2 .. chars) from ALPHABET."""
    lengths = rng.integers(chars // 2, chars + 1, size=n)
    letters = rng.integers(0, len(ALPHABET), size=int(lengths.sum()))
    flat = "".join(ALPHABET[i] for i in letters.tolist())
    out, at = [], 0
    for n_chars in lengths.tolist():
        out.append(flat[at:at + n_chars])
        at += n_chars
    return out


def build(device: str, seed: int) -> dict:
    """Weights and the pool of raw text batches, deterministic from ``seed``."""
    import numpy as np
    import torch

    size = _size(device)
    rng = np.random.default_rng(int(seed))
    gen = torch.Generator().manual_seed(int(seed))
    v, h, c = size["buckets"], size["hidden"], size["classes"]
    params = {
        "w1": (torch.randn(h, v, generator=gen) * v ** -0.5).to(device),
        "b1": (torch.randn(h, generator=gen) * 0.1).to(device),
        "w2": (torch.randn(h, h, generator=gen) * h ** -0.5).to(device),
        "b2": (torch.randn(h, generator=gen) * 0.1).to(device),
        "w3": (torch.randn(c, h, generator=gen) * h ** -0.5).to(device),
        "b3": (torch.randn(c, generator=gen) * 0.1).to(device),
    }
    pool = [_texts(rng, size["batch"], size["chars"]) for _ in range(size["pool"])]
    return {"size": size, "params": params, "pool": pool, "device": str(device), "i": 0}


def next_batch(state: dict) -> list[str]:
    texts = state["pool"][state["i"] % len(state["pool"])]
    state["i"] += 1
    return texts


def classify(params: dict, features):
    """The model: counts [batch, buckets] float32 -> logits [batch, classes]."""
    import torch.nn.functional as F

    hidden = F.relu(F.linear(features, params["w1"], params["b1"]))
    hidden = F.relu(F.linear(hidden, params["w2"], params["b2"]))
    return F.linear(hidden, params["w3"], params["b3"])


def featurize(texts: list[str], buckets: int) -> list[list[int]]:
    """Bag of hashed character trigrams: one row of bucket counts per text."""
    rows = []
    for text in texts:
        row = [0] * buckets
        for i in range(len(text) - 2):
            h = (ord(text[i]) * MULT * MULT + ord(text[i + 1]) * MULT + ord(text[i + 2])) % buckets
            row[h] += 1
        rows.append(row)
    return rows


def setup(device: str, seed: int) -> dict:
    return build(device, seed)


def step(state: dict):
    import torch

    texts = next_batch(state)
    with torch.no_grad():
        counts = featurize(texts, state["size"]["buckets"])
        features = torch.tensor(counts, dtype=torch.float32, device=state["device"])
        return classify(state["params"], features)


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("pool",)


def refill(state: dict, seed: int) -> None:
    """A new pool of texts, drawn as build draws it (the pool list itself is kept: a fix may hold it)."""
    import numpy as np

    size, rng = state["size"], np.random.default_rng(int(seed))
    state["pool"][:] = [_texts(rng, size["batch"], size["chars"]) for _ in range(size["pool"])]
