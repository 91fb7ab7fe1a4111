"""persistent-kernel prototype: softmax over each of S variable-length segments of a packed ragged
tensor (one segment per request: 64 to 16384 scores each), as a serving loop would do it.

slow     one Triton launch per segment (a one-program kernel, the segment's offset and length as
         arguments): S launches per step, each a few microseconds of GPU work behind ~20 us of host
         launch cost (Triton's Python launcher + the driver), so the GPU idles between them (launch-bound).
fast     one persistent launch: grid = 4 programs per SM, each looping over segments
         pid, pid + grid, ... reading offsets and lengths from device arrays. Same per-segment code
         (an online softmax over 4096-wide chunks: running max and rescaled sum, then a second pass).
graph    the slow loop captured once in a CUDA graph and replayed (the other cure for launch
         overhead; extra reference, not profiled with ncu).
"""
from __future__ import annotations

import sys
from pathlib import Path

import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

NAME = "segment_softmax"
VARIANTS = ("slow", "fast", "graph")
SIZES = {"S1024": {"segments": 1024}, "S4096": {"segments": 4096}, "S8192": {"segments": 8192}}
DEFAULT = "S8192"   # enough work per step that the one persistent launch keeps the GPU busier than the host
TOL = (1e-5, 1e-6)
BLOCK = 4096        # chunk width
MAX_LEN = 16384     # the longest segment
MIN_LEN = 64
WARPS = 8
PROGRAMS_PER_SM = 4


@triton.jit
def _softmax_segment(x_ptr, out_ptr, start, length, BLOCK: tl.constexpr):
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


@triton.jit(do_not_specialize=["start", "length"])   # one compiled kernel for every segment
def segment_softmax_one(x_ptr, out_ptr, start, length, BLOCK: tl.constexpr):
    _softmax_segment(x_ptr, out_ptr, start, length, BLOCK)


@triton.jit
def segment_softmax_persistent(x_ptr, out_ptr, starts_ptr, lengths_ptr, num_segments, BLOCK: tl.constexpr):
    for seg in range(tl.program_id(0), num_segments, tl.num_programs(0)):
        _softmax_segment(x_ptr, out_ptr, tl.load(starts_ptr + seg), tl.load(lengths_ptr + seg), BLOCK)


def setup(device: str, seed: int, segments: int) -> dict:
    import numpy as np
    import torch

    rng = np.random.default_rng(seed)
    lengths = rng.integers(MIN_LEN, MAX_LEN + 1, size=segments)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    total = int(lengths.sum())
    gen = torch.Generator(device=device).manual_seed(int(seed))
    x = torch.randn(total, generator=gen, device=device) * 4
    state = {"x": x, "out": torch.empty_like(x), "starts": [int(s) for s in starts],
             "lengths": [int(n) for n in lengths],
             "starts_dev": torch.as_tensor(starts, device=device, dtype=torch.int32),
             "lengths_dev": torch.as_tensor(lengths, device=device, dtype=torch.int32),
             "programs": PROGRAMS_PER_SM * torch.cuda.get_device_properties(device).multi_processor_count,
             "graph": None}
    return state


def _slow(state: dict):
    x, out = state["x"], state["out"]
    for start, length in zip(state["starts"], state["lengths"]):
        segment_softmax_one[(1,)](x, out, start, length, BLOCK=BLOCK, num_warps=WARPS)
    return out


def _graph(state: dict):
    import torch

    if state["graph"] is None:
        _slow(state)                        # compile and warm up outside the capture
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            _slow(state)
        state["graph"] = g
    state["graph"].replay()
    return state["out"]


def _fast(state: dict):
    segment_softmax_persistent[(state["programs"],)](state["x"], state["out"], state["starts_dev"],
                                                     state["lengths_dev"], len(state["lengths"]), BLOCK=BLOCK,
                                                     num_warps=WARPS)
    return state["out"]


def run(state: dict, variant: str):
    return {"slow": _slow, "fast": _fast, "graph": _graph}[variant](state)


def main_kernel(state: dict, variant: str):
    """slow: one per-segment launch (the longest segment); fast: the persistent launch."""
    if variant == "fast":
        return _fast(state)
    i = max(range(len(state["lengths"])), key=state["lengths"].__getitem__)
    segment_softmax_one[(1,)](state["x"], state["out"], state["starts"][i], state["lengths"][i], BLOCK=BLOCK,
                              num_warps=WARPS)
    return state["out"]


def reference(state: dict):
    import torch

    parts = torch.split(state["x"].double(), state["lengths"])
    return torch.cat([torch.softmax(p, 0) for p in parts]).float()


def notes(state: dict) -> dict:
    return {"segments": len(state["lengths"]), "elements": sum(state["lengths"]),
            "launches_per_step": {"slow": len(state["lengths"]), "fast": 1, "graph": 1}}


def profile(out_path: str, variant: str, *, seed: int = 0, size: str = DEFAULT, steps: int = 10) -> None:
    """A torch.profiler (Kineto) trace of `steps` ProfilerStep#N steps of one variant, recorded the way
    perflab.puzzles.runner.profile_steps does it (warm-up, one profiler warm-up step, no sync per step)."""
    import torch
    from torch.profiler import ProfilerActivity, profile as tprofile, schedule

    state = setup("cuda", seed, **SIZES[size])
    for _ in range(3):
        run(state, variant)
    torch.cuda.synchronize()
    with tprofile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                  schedule=schedule(wait=0, warmup=1, active=steps, repeat=1), record_shapes=True,
                  on_trace_ready=lambda p: p.export_chrome_trace(out_path)) as prof:
        for _ in range(1 + steps):
            run(state, variant)
            prof.step()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--trace":
        profile(sys.argv[2], sys.argv[3], steps=int(sys.argv[4]) if len(sys.argv) > 4 else 10)
        sys.exit(0)
    sys.exit(_common.main(sys.modules[__name__]))
