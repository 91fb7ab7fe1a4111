"""pyspy-sampling: the reference solution.

Same weights, batches and scores as workload.py. The host no longer touches every event in Python:
the ids and ages go to the device as they are (one copy each, from the numpy arrays) and the
hash, the clipping and the recency weights are a handful of tensor ops over the whole batch. The
32-bit multiplications are split in 16-bit halves so every intermediate fits in int64 exactly: the
buckets are bit-identical to the Python integer mix.
"""
from __future__ import annotations

from perflab.workloads import siblings

_w = siblings.load(__file__, "24-pyspy-sampling")   # this puzzle's workload.py: what the fix keeps
SIZE, SMOKE_SIZE = _w.SIZE, _w.SMOKE_SIZE
MASK, MIX, MAX_AGE, TAU = _w.MASK, _w.MIX, _w.MAX_AGE, _w.TAU


def _mul32(h, m: int):
    """(h * m) mod 2**32 for 0 <= h < 2**32 without leaving int64: two 16-bit halves of m."""
    lo = h * (m & 0xFFFF)
    hi = ((h * (m >> 16)) & 0xFFFF) << 16
    return (lo + hi) & MASK


def hash_tensor(ids, buckets: int):
    h = ids & MASK
    h = _mul32(h ^ (h >> 16), MIX[0])
    h = _mul32(h ^ (h >> 15), MIX[1])
    h = _mul32(h ^ (h >> 16), MIX[2])
    return ((h ^ (h >> 15)) % buckets).reshape(-1)


def build_inputs(ids, ages, buckets: int, device: str):
    import torch

    batch, history = ids.shape
    ids_t = torch.from_numpy(ids).to(device, non_blocking=True)
    ages_t = torch.from_numpy(ages).to(device, non_blocking=True)
    idx = hash_tensor(ids_t, buckets)
    weights = torch.exp(-ages_t.clamp(max=MAX_AGE) / TAU).reshape(-1).to(torch.float32)
    offsets = torch.arange(0, batch * history, history, dtype=torch.int64, device=device)
    return idx, offsets, weights


def setup(device: str, seed: int) -> dict:
    return _w.build(device, seed)


def step(state: dict):
    import torch

    ids, ages = _w.next_batch(state)
    with torch.no_grad():
        idx, offsets, weights = build_inputs(ids, ages, state["size"]["buckets"], state["device"])
        return _w.score(state["params"], idx, offsets, weights)
