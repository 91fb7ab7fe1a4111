"""allocator-churn: the slow workload.

A ranking service scores 32,768 candidate items per request with a small MLP tower: 12 blocks of
Linear(256, 256) -> LayerNorm -> GELU, then a linear head to one score per item (bf16 on the GPU).
Every layer's output is a 16 MiB activation that lives only until the next layer has read it.

The service shares its GPU with a retrieval model, and after an out-of-memory crash somebody made the
tower "memory friendly": after every layer it calls ``torch.cuda.empty_cache()``, so that PyTorch's
caching allocator hands the memory it holds but does not use back to the driver.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> tensor`` (the
scores [items], float32). On the CPU (smoke runs) the same tower, tiny, in float32; there
``torch.cuda.empty_cache()`` does nothing.
"""
from __future__ import annotations

from perflab.workloads import sizes

SIZE = {"items": 32768, "width": 256, "blocks": 12}
SMOKE_SIZE = {"items": 64, "width": 16, "blocks": 2}


def build(device: str, seed: int) -> dict:
    """The tower (eval mode) and one request's candidate features, deterministic from ``seed``."""
    import torch
    from torch import nn

    size = sizes.pick(device, SIZE, SMOKE_SIZE)
    dtype = torch.bfloat16 if str(device).startswith("cuda") else torch.float32
    w = size["width"]
    with torch.random.fork_rng(devices=[]):  # nn's default initialization, seeded, leaving the global RNG as it was
        torch.manual_seed(int(seed))
        layers: list = []
        for _ in range(size["blocks"]):
            layers += [nn.Linear(w, w), nn.LayerNorm(w), nn.GELU()]
        model = nn.Sequential(*layers, nn.Linear(w, 1)).to(device=device, dtype=dtype).eval()
        x = torch.randn(size["items"], w).to(device=device, dtype=dtype)
    return {"size": size, "model": model, "x": x, "device": str(device)}


def keep_memory_low() -> None:
    """The service's habit after every layer: give what the caching allocator holds unused back to the driver."""
    import torch

    torch.cuda.empty_cache()


def scores(state: dict, after_each_layer=None):
    """Run the tower layer by layer; `after_each_layer()` (if given) runs after every layer."""
    x = state["x"]
    for layer in state["model"]:
        x = layer(x)
        if after_each_layer is not None:
            after_each_layer()
    return x.squeeze(1).float()


def setup(device: str, seed: int) -> dict:
    return build(device, seed)


def step(state: dict):
    import torch

    with torch.inference_mode():
        return scores(state, after_each_layer=keep_memory_low)


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("x",)
