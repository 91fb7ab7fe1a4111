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
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

NAME = "matmul_pipelined"
VARIANTS = ("slow", "fast", "stages4")
STAGES = {"slow": 1, "fast": 3, "stages4": 4}
SIZES = {"2048": {"m": 2048, "n": 2048, "k": 2048}, "4096": {"m": 4096, "n": 4096, "k": 4096},
         "8192x8192x2048": {"m": 8192, "n": 8192, "k": 2048}, "4096x4096x16384": {"m": 4096, "n": 4096, "k": 16384}}
DEFAULT = "4096"
TOL = (2e-2, 2e-2)
BM, BN, BK, GROUP, WARPS = 128, 256, 64, 8, 8


@triton.jit
def matmul_pipelined(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                     BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(N, BN)
    in_group = GROUP * num_n
    first_m = (pid // in_group) * GROUP
    group_m = min(num_m - first_m, GROUP)
    pid_m = first_m + (pid % in_group) % group_m
    pid_n = (pid % in_group) // group_m
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :]
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in range(0, tl.cdiv(K, BK)):           # shapes are multiples of the tile: no masks
        acc = tl.dot(tl.load(a_ptrs), tl.load(b_ptrs), acc)
        a_ptrs += BK
        b_ptrs += BK * stride_bk
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :], acc.to(tl.bfloat16))


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
