"""tile-quantization: the reference solution. Only the tile config changes: 48 x 48 tiles (one warp each)
divide 144 exactly, where 128 x 128 tiles cover 256 x 256 per matrix, 68 % of it padding that the tensor
cores multiply anyway. Same kernel code, same sums in the same order per output: the same results.

The slow version: see workload.py's docstring.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state``, ``step(state) -> out`` ([2304, 144, 144] fp32).
"""
from __future__ import annotations

import numpy as np

from perflab.workloads import siblings
from perflab.workloads.cuda_kernels import kernel, view

_w = siblings.load(__file__, "59-tile-quantization")   # this puzzle's workload.py: what the fix keeps
KERNEL_TEMPLATE, kernel_name, padded, make_input, reference_state = (
    _w.KERNEL_TEMPLATE, _w.kernel_name, _w.padded, _w.make_input, _w.reference_state)

BATCH, M, N, K = 2304, 144, 144, 256

# The tile config: a tile that divides 144 (144 = 3 x 48), so nothing is padded. One warp per 48 x 48 tile.
TILE_M, TILE_N, WARPS_M, WARPS_N = 48, 48, 1, 1


# setup and step as in workload.py, written out here: they must build and launch this file's tile (TILE_*, WARPS_*).
def setup(device: str, seed: int) -> dict:
    import torch

    assert TILE_M % (16 * WARPS_M) == 0 and TILE_N % (8 * WARPS_N) == 0, "each warp needs whole 16 x 8 MMA tiles"
    f1, f2 = make_input(device, seed)
    mp, np_ = padded(M, TILE_M), padded(N, TILE_N)
    a = torch.zeros(BATCH, mp, K, dtype=torch.bfloat16, device=device)   # stored padded: the kernel reads whole tiles
    b = torch.zeros(BATCH, np_, K, dtype=torch.bfloat16, device=device)
    a[:, :M] = f1
    b[:, :N] = f2
    c = torch.empty(BATCH, mp, np_, device=device)
    name = kernel_name(TILE_M, TILE_N)   # this config's tile, not the workload's
    src = KERNEL_TEMPLATE.format(tm=TILE_M, tn=TILE_N, wm=WARPS_M, wn=WARPS_N, name=name)
    return {"f1": f1, "f2": f2, "out": c, "mp": mp, "np": np_,
            "args": (view(a.view(torch.int16)), view(b.view(torch.int16)), view(c)),
            "kernel": kernel(src, name)}


def step(state: dict):
    import torch

    grid = (state["np"] // TILE_N, state["mp"] // TILE_M, BATCH)
    torch.cuda.nvtx.range_push(f"gemm_bf16 M={M} N={N} K={K} batch={BATCH}")
    state["kernel"](grid, (WARPS_M * WARPS_N * 32,), (*state["args"], np.int32(state["mp"]), np.int32(state["np"]),
                                                       np.int32(K)))
    torch.cuda.nvtx.range_pop()
    return state["out"][:, :M, :N]
