"""uncoalesced-access: the slow workload.

Convert a row-major fp32 matrix [ROWS, COLS] into its transpose [COLS, ROWS], scaled by 2 (a layout
change before a column-wise op, as in a KV-cache or weight re-layout). One thread per output element:
consecutive threads write consecutive outputs, which means they READ down a column of the input:
32 lanes of a warp touch 32 different rows, 32 sectors for one 128-byte request's worth of data.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state``, ``step(state) -> out`` ([COLS, ROWS] fp32).
"""
from __future__ import annotations

import numpy as np

from perflab.workloads.cuda_kernels import kernel_state

ROWS, COLS = 4096, 8192

KERNEL_SRC = r"""
extern "C" __global__ void transpose_scale(const float* __restrict__ in, float* __restrict__ out,
                                           int rows, int cols) {
  size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x;   // index into out [cols, rows]
  if (t >= (size_t)rows * cols) return;
  int r = (int)(t % rows), c = (int)(t / rows);
  // TODO: lanes r, r+1, ... read down a column of `in`. Make both the reads and the writes of a
  // warp contiguous (hint: stage a 32x32 tile through shared memory; mind the banks).
  out[t] = 2.f * in[(size_t)r * cols + c];
}
"""


def make_input(device: str, seed: int):
    import torch

    gen = torch.Generator(device=device).manual_seed(int(seed))  # drawn on the device: fast
    return (torch.rand(ROWS, COLS, generator=gen, device=device) - 0.5)


def reference(x):
    """What every variant must return (torch; the GPU tests compare against it)."""
    return (2.0 * x).t().contiguous()


def setup(device: str, seed: int) -> dict:
    import torch

    x = make_input(device, seed)
    out = torch.empty(COLS, ROWS, device=device)
    return kernel_state(x, out, KERNEL_SRC, "transpose_scale")


def step(state: dict):
    n = ROWS * COLS
    state["kernel"](((n + 255) // 256,), (256,),
                    (state["x_cu"], state["out_cu"], np.int32(ROWS), np.int32(COLS)))
    return state["out"]


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("x",)


def refill(state: dict, seed: int) -> None:
    """New values, drawn as setup draws them (the CuPy view shares the tensor's memory)."""
    from perflab.workloads import fresh

    fresh.redraw(state, make_input, seed, "x")
