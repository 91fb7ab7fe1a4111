"""pyspy-sampling: the slow workload.

A click-through ranker. Every step scores a batch of requests; each request carries the ids of the
last ``history`` items its user touched and how many minutes ago (numpy arrays from the feature
store). Before the model runs, the host
turns that history into model inputs in plain Python:

- ``clip_ages``: ages clipped to a window (minutes);
- ``decay_weights``: an exponential recency weight per event (``math.exp``);
- ``hash_ids``: every item id hashed into ``buckets`` embedding rows (a 32-bit integer mix, three
  multiply-xorshift rounds, written out in Python integers);
- ``build_inputs``: the flat index, offset and weight tensors (``torch.tensor`` from the lists).

The model is an ``EmbeddingBag`` (sum of the weighted rows of a request's history) and a two-layer
MLP on the device (hidden 1,024 on the GPU, 256 on the CPU); ``step`` returns one score per request.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> tensor``
(float32 [batch] on the device), the scores of the next batch of the state's pool.
"""
from __future__ import annotations

import math
import os

SIZE = {"batch": 256, "history": 96, "items": 1_000_000, "buckets": 65536, "dim": 64, "hidden": 1024, "pool": 4}
CPU_HIDDEN = 256
SMOKE_SIZE = {"batch": 32, "history": 16, "items": 10_000, "buckets": 1024, "dim": 16, "hidden": 32, "pool": 4}
MAX_AGE = 10_080.0          # minutes: one week
TAU = 1_440.0               # recency time constant: one day
MASK = 0xFFFFFFFF
MIX = (0x7FEB352D, 0x846CA68B, 0x9E3779B1)


def full_size(device: str) -> dict:
    return dict(SIZE, hidden=CPU_HIDDEN) if str(device).startswith("cpu") else dict(SIZE)


def _size(device: str) -> dict:
    if os.environ.get("PERFLAB_SMOKE", "0") != "0":
        return dict(SMOKE_SIZE)
    return full_size(device)


def build(device: str, seed: int, size: dict | None = None) -> dict:
    """Model weights and a pool of request batches (item ids and ages), deterministic from ``seed``."""
    import numpy as np
    import torch

    size = dict(size) if size else _size(device)
    rng = np.random.default_rng(int(seed))
    gen = torch.Generator().manual_seed(int(seed))
    b, d, h = size["buckets"], size["dim"], size["hidden"]
    params = {
        "table": (torch.randn(b, d, generator=gen) * 0.1).to(device),
        "w1": (torch.randn(h, d, generator=gen) * d ** -0.5).to(device),
        "b1": (torch.randn(h, generator=gen) * 0.1).to(device),
        "w2": (torch.randn(1, h, generator=gen) * h ** -0.5).to(device),
        "b2": (torch.randn(1, generator=gen) * 0.1).to(device),
    }
    pool = []
    for _ in range(size["pool"]):
        ids = rng.integers(0, size["items"], size=(size["batch"], size["history"]), dtype=np.int64)
        ages = rng.exponential(TAU, size=(size["batch"], size["history"])) * 3.0
        pool.append((ids, ages))
    return {"size": size, "params": params, "pool": pool, "device": str(device), "i": 0}


def next_batch(state: dict) -> tuple:
    """(ids int64 [batch, history], ages float64 minutes [batch, history]) as numpy arrays."""
    batch = state["pool"][state["i"] % len(state["pool"])]
    state["i"] += 1
    return batch


def score(params: dict, idx, offsets, weights):
    """The model: weighted bag of embedding rows per request -> MLP -> one score per request."""
    import torch.nn.functional as F

    bag = F.embedding_bag(idx, params["table"], offsets, mode="sum", per_sample_weights=weights)
    hidden = F.relu(F.linear(bag, params["w1"], params["b1"]))
    return F.linear(hidden, params["w2"], params["b2"]).squeeze(1)


def clip_ages(ages) -> list[list[float]]:
    rows = []
    for row in ages.tolist():
        rows.append([a if a < MAX_AGE else MAX_AGE for a in row])
    return rows


def decay_weights(ages: list[list[float]]) -> list[float]:
    out = []
    for row in ages:
        out.extend(math.exp(-a / TAU) for a in row)
    return out


def hash_ids(ids, buckets: int) -> list[int]:
    """Bucket of every item id: a 32-bit integer mix (lowbias32-style), then modulo buckets."""
    out = []
    for row in ids.tolist():
        for x in row:
            h = x & MASK
            h = ((h ^ (h >> 16)) * MIX[0]) & MASK
            h = ((h ^ (h >> 15)) * MIX[1]) & MASK
            h = ((h ^ (h >> 16)) * MIX[2]) & MASK
            out.append((h ^ (h >> 15)) % buckets)
    return out


def build_inputs(ids, ages, buckets: int, device: str):
    import torch

    idx = torch.tensor(hash_ids(ids, buckets), dtype=torch.int64, device=device)
    weights = torch.tensor(decay_weights(clip_ages(ages)), dtype=torch.float32, device=device)
    batch, history = ids.shape
    offsets = torch.arange(0, batch * history, history, dtype=torch.int64, device=device)
    return idx, offsets, weights


def setup(device: str, seed: int) -> dict:
    return build(device, seed)


def step(state: dict):
    import torch

    ids, ages = next_batch(state)
    with torch.no_grad():
        idx, offsets, weights = build_inputs(ids, ages, state["size"]["buckets"], state["device"])
        return score(state["params"], idx, offsets, weights)


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("pool",)


def refill(state: dict, seed: int) -> None:
    """New item ids and ages in every batch of the pool, in place, drawn as build draws them."""
    import numpy as np

    size, rng = state["size"], np.random.default_rng(int(seed))
    for ids, ages in state["pool"]:
        ids[...] = rng.integers(0, size["items"], size=ids.shape, dtype=np.int64)
        ages[...] = rng.exponential(TAU, size=ages.shape) * 3.0
