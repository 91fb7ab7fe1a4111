"""custom-trace-rules: the slow workload.

A scoring service runs an MLP over micro-batches: one step = 10 iterations, each inside a
``torch.profiler.record_function("iteration#N")`` range (N counts iterations since setup). Every 10th
iteration (N % 10 == 7) an audit hook fires: it reads the first 64 rows of that iteration's
hidden activations and computes their sum of squares in float64, for a drift monitor.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> tuple``;
``step`` returns ``(scores, audit)``: scores [10, classes] float32 (the row-mean of each iteration's
output) and audit, a float64 scalar tensor on the device: the audit value of the latest audited
iteration (0 before the first).
"""
from __future__ import annotations

import os

SIZE = {"batch": 4096, "dim": 1024, "hidden": 2048, "classes": 256, "iters": 10, "pool": 3, "audit_rows": 64}
CPU_SIZE = {"batch": 256, "dim": 128, "hidden": 256, "classes": 64, "iters": 10, "pool": 3, "audit_rows": 64}
SMOKE_SIZE = {"batch": 64, "dim": 32, "hidden": 64, "classes": 16, "iters": 10, "pool": 3, "audit_rows": 16}
AUDIT_EVERY, AUDIT_AT = 10, 7


def _size(device: str) -> dict:
    if os.environ.get("PERFLAB_SMOKE", "0") != "0":
        return dict(SMOKE_SIZE)
    return dict(CPU_SIZE) if str(device).startswith("cpu") else dict(SIZE)


def build(device: str, seed: int) -> dict:
    import torch

    size = _size(device)
    gen = torch.Generator().manual_seed(int(seed))
    d, h, c = size["dim"], size["hidden"], size["classes"]

    def randn(*shape, std=1.0):
        return (torch.randn(*shape, generator=gen) * std).to(device)

    return {"size": size, "device": str(device), "n": 0,
            "w1": randn(h, d, std=d ** -0.5), "w2": randn(c, h, std=h ** -0.5),
            "pool": [randn(size["batch"], d) for _ in range(size["pool"])],
            "audit": torch.zeros((), dtype=torch.float64, device=device)}


def hidden(state: dict, x):
    import torch.nn.functional as F

    return F.relu(F.linear(x, state["w1"]))


def scores(state: dict, h):
    import torch.nn.functional as F

    return F.linear(h, state["w2"]).mean(dim=0)


def audit_value(rows: list[list[float]]) -> float:
    """The drift monitor's number: sum of squares of the audited activations, in float64."""
    total = 0.0
    for row in rows:
        for v in row:
            total += v * v
    return total


def setup(device: str, seed: int) -> dict:
    return build(device, seed)


def step(state: dict):
    import torch
    from torch.profiler import record_function

    size, out = state["size"], []
    with torch.no_grad():
        for _ in range(size["iters"]):
            n = state["n"]
            with record_function(f"iteration#{n}"):
                x = state["pool"][n % len(state["pool"])]
                h = hidden(state, x)
                out.append(scores(state, h))
                if n % AUDIT_EVERY == AUDIT_AT:
                    rows = h[: size["audit_rows"]].tolist()              # to the host, as Python floats
                    state["audit"] = torch.tensor(audit_value(rows), dtype=torch.float64, device=state["device"])
            state["n"] = n + 1
        return torch.stack(out), state["audit"]


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("pool",)
