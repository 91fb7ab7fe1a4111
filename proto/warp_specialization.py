"""warp-specialization prototype: one Triton bf16 GEMM (C = A @ B^T, B stored [N, K] like nn.Linear's
weight; TMA tensor-descriptor loads, wgmma, 128x256x64 tiles, 3-stage pipeline) with and without
Triton's automatic warp specialization (tl.range(..., warp_specialize=True), Triton 3.6 on Hopper).

slow     warp_specialize=False, 8 warps (two warpgroups): every warp issues the TMA loads of the next
         stages AND runs the wgmma of this one, in one instruction stream.
fast     warp_specialize=True, num_warps=4: the compiler splits the loop into a producer warpgroup
         (TMA loads, few registers: setmaxnreg) and two consumer warpgroups (wgmma on 64 rows each),
         12 warps in all, handing buffers over through mbarriers.
slow_s4 / fast_s4   the same with 4 stages; slow_n128 / fast_n128: 128x128 tiles, 4 stages (extra
         references); cublas: torch.matmul (reference).
The tiles and the order of accumulation along K are the same: same result (checked with allclose).
"""
from __future__ import annotations

import sys
from pathlib import Path

import triton

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))   # perflab, from this tree
import _common  # noqa: E402
from perflab.workloads import siblings  # noqa: E402

# the kernel is the catalog puzzle's (69-warp-specialization, one copy); the variants here add other tiles/stages
_w = siblings.load(None, "69-warp-specialization")
matmul_tma = _w.matmul_tma

NAME = "matmul_tma"
VARIANTS = ("slow", "fast", "slow_s4", "fast_s4", "slow_n128", "fast_n128", "cublas")
# variant -> (warp_specialize, num_warps, stages, BN)
CONFIG = {"slow": (False, 8, 3, 256), "fast": (True, 4, 3, 256), "slow_s4": (False, 8, 4, 256),
          "fast_s4": (True, 4, 4, 256), "slow_n128": (False, 8, 4, 128), "fast_n128": (True, 4, 4, 128)}
SIZES = {"4096": {"m": 4096, "n": 4096, "k": 4096}, "8192": {"m": 8192, "n": 8192, "k": 8192},
         "8192x8192x1024": {"m": 8192, "n": 8192, "k": 1024}}
DEFAULT = "8192"
TOL = (2e-2, 2e-2)
BM, BK, GROUP = _w.BM, _w.BK, _w.GROUP   # the puzzle's tile height, K step and tile-row group


def setup(device: str, seed: int, m: int, n: int, k: int) -> dict:
    import torch

    triton.set_allocator(_w._scratch)   # device-side tensor descriptors need a scratch allocation
    gen = torch.Generator(device=device).manual_seed(int(seed))
    a = torch.randn(m, k, generator=gen, device=device).to(torch.bfloat16)
    b = torch.randn(n, k, generator=gen, device=device).to(torch.bfloat16)
    return {"a": a, "b": b, "out": torch.empty(m, n, device=device, dtype=torch.bfloat16), "m": m, "n": n, "k": k}


def main_kernel(state: dict, variant: str):
    if variant == "cublas":
        return state["a"] @ state["b"].T
    ws, warps, stages, bn = CONFIG[variant]
    m, n, k = state["m"], state["n"], state["k"]
    matmul_tma[(triton.cdiv(m, BM) * triton.cdiv(n, bn),)](
        state["a"], state["b"], state["out"], m, n, k, BM=BM, BN=bn, BK=BK, GROUP=GROUP, WS=ws, STAGES=stages,
        num_warps=warps)
    return state["out"]


run = main_kernel


def notes(state: dict) -> dict:
    return {"gflop": 2 * state["m"] * state["n"] * state["k"] / 1e9}


if __name__ == "__main__":
    sys.exit(_common.main(sys.modules[__name__]))
