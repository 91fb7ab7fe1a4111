"""Fresh inputs for the fix checker's timed repetitions (puzzles/engine/guard.py).

A workload names its inputs in `INPUTS`; the guard refills them in place before every timed sample. Where
the guard's default draw does not fit an input (a token id, a pool of texts, a skewed routing, data drawn per
rank), the workload defines `refill(state, seed)` and draws the new values itself with these helpers: the
same seed gives the same values, whatever state (the reference's or the fix's) they land in.
torch is imported lazily.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any


def generator(device: Any, seed: int) -> Any:
    import torch

    return torch.Generator(device=device).manual_seed(int(seed) % (2**63))


def randn_(t: Any, seed: int, std: float = 1.0) -> None:
    """t (a floating tensor) refilled in place with normal values of standard deviation `std`."""
    import torch

    with torch.no_grad():
        t.copy_(torch.randn(t.shape, generator=generator(t.device, seed), device=t.device) * std)


def randint_(t: Any, seed: int, low: int, high: int) -> None:
    """t (an integer tensor) refilled in place with ids in [low, high)."""
    import torch

    with torch.no_grad():
        t.copy_(torch.randint(low, high, t.shape, generator=generator(t.device, seed), device=t.device))


def redraw(state: dict, make: Callable[[str, int], Any], seed: int, *keys: str) -> None:
    """state[keys] refilled in place with what the workload's own `make(device, seed)` draws (one tensor or a
    tuple, in the order of `keys`): fresh values with the distribution setup gave them."""
    import torch

    made = make(str(state[keys[0]].device), seed)
    made = made if isinstance(made, tuple) else (made,)
    with torch.no_grad():
        for key, value in zip(keys, made, strict=True):
            state[key].copy_(value)


def rank_rows(state: dict, seed: int) -> None:
    """The multi-GPU workloads' refill: new rows in state["x"] for this rank, drawn per rank the way their setup
    seeds a rank's own data (seed * 7919 + rank)."""
    randn_(state["x"], int(seed) * 7919 + state["rank"])
