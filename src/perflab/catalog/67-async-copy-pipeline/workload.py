"""async-copy-pipeline: the slow workload.

One bf16 GEMM, C = A @ B (M = N = K = 4096; fp32 accumulation, bf16 out), by a Triton kernel with
128 x 256 x 64 tiles and 8 warps: on Hopper the tile's MMAs are wgmma instructions and its fp32
accumulator holds ~200 registers per thread, so one block runs per SM. Programs walk the output tiles in
groups of 8 tile rows (perflab.workloads.tile_order) so that neighbours share A and B in L2. The K loop
loads an A tile and a B tile, multiplies them into the accumulator and moves on; NUM_STAGES is the depth
Triton's software pipeliner gives that loop.

Without Triton or CUDA (device "cpu"), step() computes the same product with torch at SMOKE_SIZE, so the
file still runs anywhere.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> tensor`` ([M, N] bf16).
"""
from __future__ import annotations

from perflab.workloads import sizes
from perflab.workloads.tile_order import grouped_tile
from perflab.workloads.triton_optional import jit, tl, triton

SIZE = {"m": 4096, "n": 4096, "k": 4096}
SMOKE_SIZE = {"m": 256, "n": 512, "k": 128}      # whole tiles: the kernel has no masks
BM, BN, BK, GROUP, WARPS = 128, 256, 64, 8, 8
NUM_STAGES = 1


@jit
def matmul_pipelined(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                     BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
    pid_m, pid_n = grouped_tile(tl.program_id(0), M, N, BM, BN, GROUP)
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


def on_gpu(state: dict) -> bool:
    return triton is not None and state["a"].is_cuda


def make_state(device: str, seed: int) -> dict:
    """A [M, K] and B [K, N] in bf16 (drawn on the device from ``seed``) and the output C [M, N]."""
    import torch

    size = sizes.pick(device, SIZE, SMOKE_SIZE)
    m, n, k = size["m"], size["n"], size["k"]
    assert m % BM == 0 and n % BN == 0 and k % BK == 0
    gen = torch.Generator(device=device).manual_seed(int(seed))
    a = torch.randn(m, k, generator=gen, device=device).to(torch.bfloat16)
    b = torch.randn(k, n, generator=gen, device=device).to(torch.bfloat16)
    return {"a": a, "b": b, "out": torch.empty(m, n, device=device, dtype=torch.bfloat16), "size": size}


def eager(state: dict):
    """The CPU path: the same product in torch (fp32 accumulation, bf16 out)."""
    return state["out"].copy_(state["a"].float() @ state["b"].float())


def launch(state: dict, stages: int):
    """One launch of matmul_pipelined over every output tile, its K loop pipelined `stages` deep."""
    a, b, c = state["a"], state["b"], state["out"]
    m, k = a.shape
    n = b.shape[1]
    matmul_pipelined[(triton.cdiv(m, BM) * triton.cdiv(n, BN),)](
        a, b, c, m, n, k, a.stride(0), b.stride(0), c.stride(0), BM=BM, BN=BN, BK=BK, GROUP=GROUP,
        num_warps=WARPS, num_stages=stages)
    return c


def setup(device: str, seed: int) -> dict:
    return make_state(device, seed)


def step(state: dict):
    if not on_gpu(state):
        return eager(state)
    return launch(state, NUM_STAGES)


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("a",)  # b: the weight operand, which a fix may re-layout once
