"""persistent-kernel: the reference solution.

Same segments, same per-segment code (workload.py's `softmax_segment`), one launch per step: a persistent
kernel whose grid is a few programs per SM (4 x 132 on an H100), each looping over the segments pid,
pid + grid, ... and reading their offsets and lengths from two device arrays built once in setup(). The
host pays one launch instead of 8192, and the GPU never waits for the next one.

A CUDA graph of the slow loop removes the host's launch calls but still replays 8192 one-program kernels
(the prototype measured 44 ms a step against 156 ms eager and 0.32 ms persistent).

Without Triton or CUDA it runs the workload's eager path.
"""
from __future__ import annotations

from perflab.workloads import siblings

_w = siblings.load(__file__, "04-persistent-kernel")   # this puzzle's workload.py: what the fix keeps
SIZE, SMOKE_SIZE, BLOCK, WARPS = _w.SIZE, _w.SMOKE_SIZE, _w.BLOCK, _w.WARPS
softmax_segment, tl = _w.softmax_segment, _w.tl
PROGRAMS_PER_SM = 4


@_w.jit
def segment_softmax_persistent(x_ptr, out_ptr, starts_ptr, lengths_ptr, num_segments, BLOCK: tl.constexpr):
    for seg in range(tl.program_id(0), num_segments, tl.num_programs(0)):
        softmax_segment(x_ptr, out_ptr, tl.load(starts_ptr + seg), tl.load(lengths_ptr + seg), BLOCK)


def setup(device: str, seed: int) -> dict:
    import torch

    state = _w.make_state(device, seed)
    if _w.on_gpu(state):
        state["starts_dev"] = torch.as_tensor(state["starts"], device=device, dtype=torch.int32)
        state["lengths_dev"] = torch.as_tensor(state["lengths"], device=device, dtype=torch.int32)
        sms = torch.cuda.get_device_properties(state["x"].device).multi_processor_count
        state["programs"] = min(PROGRAMS_PER_SM * sms, len(state["lengths"]))
    return state


def step(state: dict):
    if "programs" not in state:
        return _w.eager(state)
    segment_softmax_persistent[(state["programs"],)](state["x"], state["out"], state["starts_dev"],
                                                     state["lengths_dev"], len(state["lengths"]), BLOCK=BLOCK,
                                                     num_warps=WARPS)
    return state["out"]
