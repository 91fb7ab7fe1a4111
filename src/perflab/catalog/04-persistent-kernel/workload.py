"""persistent-kernel: the slow workload.

Softmax over each of 8192 variable-length segments of one packed tensor (one segment per request of a
serving batch, 64 to 16384 scores each), as a ragged attention or a grouped router would need it. The
per-segment code is a small Triton kernel: an online softmax over 4096-wide chunks (a running maximum and
a sum rescaled to it, then a second pass that normalizes). The step launches it once per segment, with
the segment's offset and length as arguments: 8192 one-program launches per step.

Without Triton or CUDA (device "cpu"), step() runs the same per-segment loop with torch.softmax, at
SMOKE_SIZE, so the file still runs anywhere.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> tensor`` (the
normalized scores, packed like the input: [total] fp32).
"""
from __future__ import annotations

from perflab.workloads import sizes
from perflab.workloads.triton_optional import jit, tl, triton   # stand-ins where Triton is absent

SIZE = {"segments": 8192, "min_len": 64, "max_len": 16384}
SMOKE_SIZE = {"segments": 24, "min_len": 4, "max_len": 300}
BLOCK = 4096        # chunk width of the online softmax
WARPS = 8


@jit
def softmax_segment(x_ptr, out_ptr, start, length, BLOCK: tl.constexpr):
    """One segment, x[start:start+length] -> out[start:start+length], by one program."""
    offs = tl.arange(0, BLOCK)
    m = tl.full((), -float("inf"), tl.float32)
    s = tl.zeros((), tl.float32)
    for c in range(0, length, BLOCK):                    # pass 1: running max, sum rescaled to it
        x = tl.load(x_ptr + start + c + offs, mask=c + offs < length, other=-float("inf"))
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    for c in range(0, length, BLOCK):                    # pass 2: normalize
        mask = c + offs < length
        x = tl.load(x_ptr + start + c + offs, mask=mask, other=-float("inf"))
        tl.store(out_ptr + start + c + offs, tl.exp(x - m) / s, mask=mask)


@jit(do_not_specialize=["start", "length"])             # one compiled kernel for every segment
def segment_softmax_one(x_ptr, out_ptr, start, length, BLOCK: tl.constexpr):
    softmax_segment(x_ptr, out_ptr, start, length, BLOCK)


def on_gpu(state: dict) -> bool:
    return triton is not None and state["x"].is_cuda


def make_state(device: str, seed: int) -> dict:
    """The packed scores and the segment table, deterministic from ``seed``."""
    import numpy as np
    import torch

    size = sizes.pick(device, SIZE, SMOKE_SIZE)
    rng = np.random.default_rng(int(seed))
    lengths = rng.integers(size["min_len"], size["max_len"] + 1, size=size["segments"])
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    gen = torch.Generator().manual_seed(int(seed))
    x = (torch.randn(int(lengths.sum()), generator=gen) * 4).to(device)
    return {"x": x, "out": torch.empty_like(x), "starts": [int(s) for s in starts],
            "lengths": [int(n) for n in lengths], "size": size}


def eager(state: dict):
    """The CPU path: the same per-segment loop in torch."""
    import torch

    x, out = state["x"], state["out"]
    for start, length in zip(state["starts"], state["lengths"]):
        out[start:start + length] = torch.softmax(x[start:start + length], 0)
    return out


def setup(device: str, seed: int) -> dict:
    return make_state(device, seed)


def step(state: dict):
    if not on_gpu(state):
        return eager(state)
    x, out = state["x"], state["out"]
    for start, length in zip(state["starts"], state["lengths"]):
        segment_softmax_one[(1,)](x, out, start, length, BLOCK=BLOCK, num_warps=WARPS)
    return out


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("x",)
