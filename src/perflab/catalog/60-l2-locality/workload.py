"""l2-miss: the slow workload.

Spatio-temporal smoothing of a video clip of T frames (fp32 [T, H, W], 64 MB a frame): every output
pixel mixes its own frame with the two frames before and after it (5 temporal taps) and the rows above
and below it in its frame. One thread per output pixel, blocks in the natural flat order: a row of 256
pixels, then the next row, then (after all H rows) the next frame.

In that order a line of frame f is wanted by the passes over frames f-2 .. f+2: by the pass over frame
f three times, one row apart (the L2 holds it), but by the other four passes a whole frame pass later,
after 5 x 64 MB of other lines went through the 50 MB L2: evicted, fetched from DRAM again. The kernel
streams at DRAM speed and reads about four times the bytes the clip holds.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state``, ``step(state) -> out`` ([T, H, W] fp32).
"""
from __future__ import annotations

import numpy as np

from perflab.workloads.cuda_kernels import kernel_state

T, H, W = 8, 4096, 4096
THREADS = 256

KERNEL_SRC = r"""
extern "C" __global__ void smooth_frames(const float* __restrict__ v, float* __restrict__ out, int T, int H, int W) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;                 // grid (W / 256, H, T): blocks run
  const int y = blockIdx.y, t = blockIdx.z;                            // x fastest, then rows, then frames
  const size_t frame = (size_t)H * W;
  const float* px = v + (size_t)y * W + x;                             // pixel (y, x) of frame 0
  const float wt[5] = {0.05f, 0.15f, 0.4f, 0.15f, 0.05f};               // frames t-2 .. t+2 (clamped)
  float acc = 0.f;
#pragma unroll
  for (int k = -2; k <= 2; ++k) acc += wt[k + 2] * px[min(max(t + k, 0), T - 1) * frame];
  const float* here = px + t * frame;                                  // rows above and below, same frame
  acc += 0.1f * (here[y > 0 ? -W : 0] + here[y < H - 1 ? W : 0]);
  // TODO: a line of a frame is wanted by the passes over five frames, four of them a whole 64 MB
  // frame pass apart: L2 has evicted it by then. Keep this arithmetic; change which pixels a block
  // computes, or in which order, so that the reads of a line come close together (or only once).
  out[t * frame + (size_t)y * W + x] = acc;
}
"""


def make_input(device: str, seed: int):
    import torch

    gen = torch.Generator(device=device).manual_seed(int(seed))  # drawn on the device: fast
    return torch.rand(T, H, W, generator=gen, device=device)


def reference(v):
    """What every variant must return (torch, same taps; the GPU tests compare against it)."""
    import torch

    t = torch.arange(v.shape[0], device=v.device)
    out = torch.zeros_like(v)
    for k, w in zip(range(-2, 3), (0.05, 0.15, 0.4, 0.15, 0.05)):
        out += w * v[(t + k).clamp(0, v.shape[0] - 1)]
    up = torch.cat([v[:, :1], v[:, :-1]], dim=1)
    down = torch.cat([v[:, 1:], v[:, -1:]], dim=1)
    return out + 0.1 * (up + down)


def setup(device: str, seed: int) -> dict:
    import torch

    x = make_input(device, seed)
    out = torch.empty_like(x)
    return kernel_state(x, out, KERNEL_SRC, "smooth_frames")


def step(state: dict):
    state["kernel"]((W // THREADS, H, T), (THREADS,),
                    (state["x_cu"], state["out_cu"], np.int32(T), np.int32(H), np.int32(W)))
    return state["out"]


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("x",)


def refill(state: dict, seed: int) -> None:
    """New values, drawn as setup draws them (the CuPy view shares the tensor's memory)."""
    from perflab.workloads import fresh

    fresh.redraw(state, make_input, seed, "x")
