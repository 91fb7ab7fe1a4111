"""warp-specialization: the slow workload.

One bf16 GEMM, C = A @ B^T (M = N = K = 8192; B stored [N, K] like nn.Linear's weight; fp32 accumulation,
bf16 out), by a Triton kernel that loads its tiles through TMA tensor descriptors into a 3-stage shared-memory
ring and multiplies them with wgmma: 128 x 256 x 64 tiles, 8 warps (two warpgroups of 64 output rows each).
Programs walk the output tiles in groups of 8 tile rows (perflab.workloads.tile_order). WARP_SPECIALIZE is
what `tl.range(..., warp_specialize=...)` gives the K loop (Triton 3.6 on Hopper).

Without Triton or CUDA (device "cpu"), step() computes the same product with torch at SMOKE_SIZE, so the
file still runs anywhere.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> tensor`` ([M, N] bf16).
"""
from __future__ import annotations

from perflab.workloads import sizes
from perflab.workloads.tile_order import grouped_tile
from perflab.workloads.triton_optional import jit, tl, triton

SIZE = {"m": 8192, "n": 8192, "k": 8192}
SMOKE_SIZE = {"m": 256, "n": 512, "k": 128}      # whole tiles: the kernel has no masks
BM, BN, BK, GROUP, STAGES = 128, 256, 64, 8, 3
WARP_SPECIALIZE, WARPS = False, 8


@jit
def matmul_tma(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
               GROUP: tl.constexpr, STAGES: tl.constexpr, WS: tl.constexpr):
    pid_m, pid_n = grouped_tile(tl.program_id(0), M, N, BM, BN, GROUP)
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1], block_shape=[BN, BK])
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in tl.range(0, tl.cdiv(K, BK), num_stages=STAGES, warp_specialize=WS):
        a = a_desc.load([pid_m * BM, k * BK])
        b = b_desc.load([pid_n * BN, k * BK])
        acc = tl.dot(a, b.T, acc)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16))


def on_gpu(state: dict) -> bool:
    return triton is not None and state["a"].is_cuda


def _scratch(size: int, alignment: int, stream):
    """Device-side tensor descriptors (tl.make_tensor_descriptor) live in a scratch buffer Triton asks for."""
    import torch

    return torch.empty(size, device="cuda", dtype=torch.int8)


def make_state(device: str, seed: int) -> dict:
    """A [M, K] and B [N, K] in bf16 (drawn on the device from ``seed``) and the output C [M, N]."""
    import torch

    size = sizes.pick(device, SIZE, SMOKE_SIZE)
    m, n, k = size["m"], size["n"], size["k"]
    assert m % BM == 0 and n % BN == 0 and k % BK == 0
    gen = torch.Generator(device=device).manual_seed(int(seed))
    a = torch.randn(m, k, generator=gen, device=device).to(torch.bfloat16)
    b = torch.randn(n, k, generator=gen, device=device).to(torch.bfloat16)
    state = {"a": a, "b": b, "out": torch.empty(m, n, device=device, dtype=torch.bfloat16), "size": size}
    if on_gpu(state):
        triton.set_allocator(_scratch)
    return state


def eager(state: dict):
    """The CPU path: the same product in torch (fp32 accumulation, bf16 out)."""
    return state["out"].copy_(state["a"].float() @ state["b"].float().T)


def launch(state: dict, warp_specialize: bool, warps: int):
    """One launch of matmul_tma over every output tile, its K loop warp-specialized or not."""
    a, b, c = state["a"], state["b"], state["out"]
    m, k = a.shape
    n = b.shape[0]
    matmul_tma[(triton.cdiv(m, BM) * triton.cdiv(n, BN),)](
        a, b, c, m, n, k, BM=BM, BN=BN, BK=BK, GROUP=GROUP, STAGES=STAGES, WS=warp_specialize, num_warps=warps)
    return c


def setup(device: str, seed: int) -> dict:
    return make_state(device, seed)


def step(state: dict):
    if not on_gpu(state):
        return eager(state)
    return launch(state, WARP_SPECIALIZE, WARPS)


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("a",)  # b: the weight operand, which a fix may re-layout once
