"""honest-timers: the slow workload.

A query-routing step in three parts, each a function of the state (the recording times them one by one):

- ``encode``: 2048 query vectors [2048, 4096] fp32 through a two-layer fp32 encoder,
  h = gelu(x @ W1) @ W2 (W1 [4096, 8192], W2 [8192, 4096]; "fp32 for accuracy");
- ``select``: scores against 512 route centroids (h @ C^T, fp32), softmax -> ``state["probs"]``;
- ``postprocess``: the top 5 routes per query brought to the host (``.cpu()``), the best one's name.

``step`` runs the three parts and returns ``state["probs"]`` [2048, 512] fp32.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> tensor``.
"""
from __future__ import annotations

import math

from perflab.workloads import sizes

SIZE = {"batch": 2048, "dim": 4096, "hidden": 8192, "routes": 512, "top": 5}
SMOKE_SIZE = {"batch": 8, "dim": 32, "hidden": 48, "routes": 16, "top": 3}
PARTS = ("encode", "select", "postprocess")


def _build(device: str, seed: int) -> dict:
    """Queries, encoder weights and route centroids (fp32, on the device), drawn from ``seed``."""
    import torch

    size = sizes.pick(device, SIZE, SMOKE_SIZE)
    gen = torch.Generator(device=device).manual_seed(int(seed))
    b, d, f, r = size["batch"], size["dim"], size["hidden"], size["routes"]

    def randn(*shape, std=1.0):
        return torch.randn(*shape, generator=gen, device=device) * std

    return {"size": size, "device": str(device), "x": randn(b, d), "w1": randn(d, f, std=1.0 / math.sqrt(d)),
            "w2": randn(f, d, std=1.0 / math.sqrt(f)), "centroids": randn(r, d, std=1.0 / math.sqrt(d)),
            "names": [f"route-{i}" for i in range(r)]}


def encode(state: dict) -> None:
    import torch.nn.functional as F

    state["h"] = F.gelu(state["x"] @ state["w1"]) @ state["w2"]


def select(state: dict) -> None:
    import torch

    state["probs"] = torch.softmax(state["h"] @ state["centroids"].T, dim=-1)


def postprocess(state: dict) -> None:
    top = state["probs"].topk(state["size"]["top"], dim=-1)
    state["top_ids"] = top.indices.cpu()                           # the host needs the route ids
    state["routes"] = [state["names"][i] for i in state["top_ids"][:, 0].tolist()]


def setup(device: str, seed: int) -> dict:
    return _build(device, seed)


def step(state: dict):
    import torch

    with torch.no_grad():
        encode(state)
        select(state)
        postprocess(state)
    return state["probs"]


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("x",)
