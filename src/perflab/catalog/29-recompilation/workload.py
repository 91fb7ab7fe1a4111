"""recompilation: the slow workload.

A request encoder: each step a batch of 16 requests arrives, padded to its longest request (the length changes from
batch to batch), and a compiled block (LayerNorm, Linear, GELU, Linear, a residual) encodes it. The block was
compiled with ``dynamic=False`` ("the dynamic-shape kernels were slower in our benchmark"), and the recompile limit
was raised to silence Dynamo's warning.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> tensor``; ``step`` returns the
encoded batch [16, length, dim] of the next batch in the pool.
"""
from __future__ import annotations

import os

SIZE = {"batch": 16, "dim": 1024, "hidden": 4096, "min_len": 96, "max_len": 640, "pool": 64}
SMOKE_SIZE = {"batch": 2, "dim": 64, "hidden": 128, "min_len": 8, "max_len": 64, "pool": 16}


def _size() -> dict:
    return dict(SMOKE_SIZE if os.environ.get("PERFLAB_SMOKE", "0") != "0" else SIZE)


def backend(device: str) -> str:
    """Inductor on the GPU; on the CPU Dynamo with AOTAutograd's eager backend (the same guards and recompiles,
    without minutes of C++ code generation)."""
    return "inductor" if str(device).startswith("cuda") else "aot_eager"


def block(params: dict, x):
    import torch.nn.functional as F

    h = F.layer_norm(x, (x.shape[-1],), params["ln_w"], params["ln_b"])
    h = F.gelu(F.linear(h, params["w1"], params["b1"]))
    return x + F.linear(h, params["w2"], params["b2"])


def lengths(seed: int, size: dict) -> list[int]:
    import numpy as np

    rng = np.random.default_rng(int(seed))
    return rng.integers(size["min_len"], size["max_len"], size=size["pool"]).tolist()


def build(device: str, seed: int) -> dict:
    """Weights and the pool of batch lengths, deterministic from ``seed``."""
    import torch

    size = _size()
    gen = torch.Generator().manual_seed(int(seed))
    dtype = torch.bfloat16 if str(device).startswith("cuda") else torch.float32
    d, h = size["dim"], size["hidden"]

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen) * scale).to(device=device, dtype=dtype)

    # scaled so that the outputs stay within about +-1.5: bf16's last digit there is under the check's tolerance,
    # and kernels that sum in another order (static vs dynamic shapes) agree to it
    params = {"ln_w": rand(d, scale=0.1) + 1, "ln_b": rand(d, scale=0.1), "w1": rand(h, d, scale=d ** -0.5),
              "b1": rand(h, scale=0.1), "w2": rand(d, h, scale=0.1 * h ** -0.5), "b2": rand(d, scale=0.01)}
    return {"size": size, "params": params, "lengths": lengths(seed, size), "device": str(device), "dtype": dtype,
            "seed": int(seed), "i": 0}


def next_batch(state: dict):
    """The next batch of the pool: [batch, length, dim], its length drawn per batch."""
    import torch

    size = state["size"]
    n = state["lengths"][state["i"] % len(state["lengths"])]
    gen = torch.Generator(device=state["device"]).manual_seed(state["seed"] * 1000 + state["i"])
    state["i"] += 1
    x = torch.randn(size["batch"], n, size["dim"], generator=gen, device=state["device"], dtype=state["dtype"])
    return x * 0.2


def setup(device: str, seed: int) -> dict:
    import torch

    state = build(device, seed)
    torch._dynamo.config.recompile_limit = 1024     # "silence the warning": every new length compiles again
    state["encode"] = torch.compile(block, dynamic=False, backend=backend(device))
    return state


def step(state: dict):
    import torch

    x = next_batch(state)
    with torch.no_grad():
        return state["encode"](state["params"], x)


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("lengths",)


def refill(state: dict, seed: int) -> None:
    """A new pool of lengths, drawn as build draws it (the list itself is kept: a fix may hold it)."""
    state["lengths"][:] = lengths(seed, state["size"])
