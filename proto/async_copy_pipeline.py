"""async-copy-pipeline prototype: one Triton bf16 GEMM (C = A @ B, fp32 accumulate, 128x256x64 tiles,
8 warps, wgmma) compiled with two software-pipelining depths.

slow   num_stages=1: each K-step loads its A and B tiles into registers, stores them to shared memory,
       then runs the wgmma: the tensor cores wait for every load (warps stall on long scoreboard) and
       the loads wait for every wgmma. One 128x256 tile per SM at a time (~200 registers per thread),
       so no other block hides the latency.
fast   num_stages=3: cp.async (LDGSTS) copies of the next two K-steps are in flight while the tensor
       cores work on this one (a 3-deep ring of shared-memory buffers, 144 KB).
stages4  num_stages=4 (extra reference).
Same tiles, same order of accumulation: the same result bit for bit (checked with allclose).
"""
from __future__ import annotations

import sys
from pathlib import Path

import triton

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))   # perflab, from this tree
import _common  # noqa: E402
from perflab.workloads import siblings  # noqa: E402

# the kernel is the catalog puzzle's (67-async-copy-pipeline, one copy), unchanged from the one recorded here
_w = siblings.load(None, "67-async-copy-pipeline")
matmul_pipelined = _w.matmul_pipelined

NAME = "matmul_pipelined"
VARIANTS = ("slow", "fast", "stages4")
STAGES = {"slow": 1, "fast": 3, "stages4": 4}
SIZES = {"2048": {"m": 2048, "n": 2048, "k": 2048}, "4096": {"m": 4096, "n": 4096, "k": 4096},
         "8192x8192x2048": {"m": 8192, "n": 8192, "k": 2048}, "4096x4096x16384": {"m": 4096, "n": 4096, "k": 16384}}
DEFAULT = "4096"
TOL = (2e-2, 2e-2)
BM, BN, BK, GROUP, WARPS = _w.BM, _w.BN, _w.BK, _w.GROUP, _w.WARPS


def setup(device: str, seed: int, m: int, n: int, k: int) -> dict:
    import torch

    assert m % BM == 0 and n % BN == 0 and k % BK == 0
    gen = torch.Generator(device=device).manual_seed(int(seed))
    a = torch.randn(m, k, generator=gen, device=device).to(torch.bfloat16)
    b = torch.randn(k, n, generator=gen, device=device).to(torch.bfloat16)
    return {"a": a, "b": b, "out": torch.empty(m, n, device=device, dtype=torch.bfloat16), "m": m, "n": n, "k": k}


def main_kernel(state: dict, variant: str):
    m, n, k = state["m"], state["n"], state["k"]
    a, b, c = state["a"], state["b"], state["out"]
    matmul_pipelined[(triton.cdiv(m, BM) * triton.cdiv(n, BN),)](
        a, b, c, m, n, k, a.stride(0), b.stride(0), c.stride(0), BM=BM, BN=BN, BK=BK, GROUP=GROUP,
        num_warps=WARPS, num_stages=STAGES[variant])
    return c


run = main_kernel


def reference(state: dict):
    return (state["a"] @ state["b"])  # cuBLAS, bf16 out


def notes(state: dict) -> dict:
    flops = 2 * state["m"] * state["n"] * state["k"]
    return {"gflop": flops / 1e9, "tiles": (state["m"] // BM) * (state["n"] // BN)}


if __name__ == "__main__":
    sys.exit(_common.main(sys.modules[__name__]))
