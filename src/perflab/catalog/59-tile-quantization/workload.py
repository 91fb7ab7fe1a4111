"""tile-quantization: the slow workload.

Feature matching: for each of 2304 image pairs, the similarity of every position of one 12 x 12 feature
map with every position of the other, S = F1 @ F2^T, with F1, F2 of 144 positions x 256 channels (bf16)
and S of 144 x 144 (fp32). The GEMM kernel is a tensor-core (mma.sync bf16) kernel built from a tile
config: TILE_M x TILE_N outputs per block, WARPS_M x WARPS_N warps; it reads whole tiles, so the inputs
are stored padded with zero rows to a multiple of the tile (and the output likewise). The config is the
library's default, 128 x 128: the 144-row matrices are padded to 256.

The kernel's name carries its tile (gemm_bf16_mma_tile<M>x<N>) and every launch runs inside an NVTX range
'gemm_bf16 M=.. N=.. K=.. batch=..': Nsight Compute records both.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state``, ``step(state) -> out`` ([2304, 144, 144] fp32).
"""
from __future__ import annotations

import numpy as np

from perflab.workloads.cuda_kernels import kernel, view

BATCH, M, N, K = 2304, 144, 144, 256

# The tile config: the library default.
# TODO: how much of each tile is padding for M = N = 144, and what does that cost? (ncu: the tile-quantization
# finding, executed tensor work against the useful 2*M*N*K*batch) Keep the kernel name built by kernel_name(TILE_M, TILE_N).
TILE_M, TILE_N, WARPS_M, WARPS_N = 128, 128, 4, 2     # 8 warps of 32 x 64

KERNEL_TEMPLATE = r"""
#define TM {tm}
#define TN {tn}
#define WM {wm}
#define WN {wn}
#define FM (TM / (16 * WM))   // 16-row MMA tiles per warp
#define FN (TN / (8 * WN))    // 8-column MMA tiles per warp

__device__ __forceinline__ unsigned ld2(const unsigned short* p) {{ return *reinterpret_cast<const unsigned*>(p); }}

// C[b] (Mp x Np, fp32) = A[b] (Mp x K) * B[b]^T (B stored Np x K); bf16 as raw 16-bit words, row-major.
extern "C" __global__ void __launch_bounds__(WM * WN * 32) {name}(const unsigned short* __restrict__ A,
    const unsigned short* __restrict__ B, float* __restrict__ C, int Mp, int Np, int K) {{
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int wm = warp / WN, wn = warp % WN;
  const size_t b = blockIdx.z;
  const unsigned short* Ab = A + b * (size_t)Mp * K;
  const unsigned short* Bb = B + b * (size_t)Np * K;
  float* Cb = C + b * (size_t)Mp * Np;
  const int m0 = blockIdx.y * TM + wm * 16 * FM, n0 = blockIdx.x * TN + wn * 8 * FN;
  float acc[FM][FN][4];
#pragma unroll
  for (int i = 0; i < FM; ++i)
#pragma unroll
    for (int j = 0; j < FN; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.f;
  for (int k = 0; k < K; k += 16) {{
    unsigned a[FM][4], bf[FN][2];
#pragma unroll
    for (int i = 0; i < FM; ++i) {{           // the m16n8k16 A fragment: rows g, g+8; columns 2t, 2t+8
      const unsigned short* p = Ab + (size_t)(m0 + i * 16 + g) * K + k + 2 * t;
      a[i][0] = ld2(p); a[i][1] = ld2(p + 8 * K); a[i][2] = ld2(p + 8); a[i][3] = ld2(p + 8 * K + 8);
    }}
#pragma unroll
    for (int j = 0; j < FN; ++j) {{           // the B fragment: column g, rows (k) 2t and 2t+8
      const unsigned short* q = Bb + (size_t)(n0 + j * 8 + g) * K + k + 2 * t;
      bf[j][0] = ld2(q); bf[j][1] = ld2(q + 8);
    }}
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
      for (int j = 0; j < FN; ++j)
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, {{%8,%9}}, {{%0,%1,%2,%3}};"
            : "+f"(acc[i][j][0]), "+f"(acc[i][j][1]), "+f"(acc[i][j][2]), "+f"(acc[i][j][3])
            : "r"(a[i][0]), "r"(a[i][1]), "r"(a[i][2]), "r"(a[i][3]), "r"(bf[j][0]), "r"(bf[j][1]));
  }}
#pragma unroll
  for (int i = 0; i < FM; ++i)
#pragma unroll
    for (int j = 0; j < FN; ++j) {{
      float* c = Cb + (size_t)(m0 + i * 16 + g) * Np + n0 + j * 8 + 2 * t;
      *reinterpret_cast<float2*>(c) = make_float2(acc[i][j][0], acc[i][j][1]);
      *reinterpret_cast<float2*>(c + 8 * (size_t)Np) = make_float2(acc[i][j][2], acc[i][j][3]);
    }}
}}
"""


def kernel_name(tile_m: int, tile_n: int) -> str:
    return f"gemm_bf16_mma_tile{tile_m}x{tile_n}"


def padded(n: int, tile: int) -> int:
    return -(-n // tile) * tile


def make_input(device: str, seed: int):
    import torch

    gen = torch.Generator(device=device).manual_seed(int(seed))  # drawn on the device: fast
    f1 = (torch.rand(BATCH, M, K, generator=gen, device=device) - 0.5).to(torch.bfloat16)
    f2 = (torch.rand(BATCH, N, K, generator=gen, device=device) - 0.5).to(torch.bfloat16)
    return f1, f2


def reference_state(state: dict):
    """What the kernel computes: bf16 products summed in fp32 (tests/gpu)."""
    import torch

    f1, f2 = state["f1"], state["f2"]
    return torch.bmm(f1.double(), f2.double().transpose(1, 2)).float()


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
    src = KERNEL_TEMPLATE.format(tm=TILE_M, tn=TILE_N, wm=WARPS_M, wn=WARPS_N, name=kernel_name(TILE_M, TILE_N))
    return {"f1": f1, "f2": f2, "out": c, "mp": mp, "np": np_,
            "args": (view(a.view(torch.int16)), view(b.view(torch.int16)), view(c)),
            "kernel": kernel(src, kernel_name(TILE_M, TILE_N))}


def step(state: dict):
    import torch

    grid = (state["np"] // TILE_N, state["mp"] // TILE_M, BATCH)
    torch.cuda.nvtx.range_push(f"gemm_bf16 M={M} N={N} K={K} batch={BATCH}")
    state["kernel"](grid, (WARPS_M * WARPS_N * 32,), (*state["args"], np.int32(state["mp"]), np.int32(state["np"]),
                                                       np.int32(K)))
    torch.cuda.nvtx.range_pop()
    return state["out"][:, :M, :N]


# No input the fix checker can refill (puzzles/engine/guard.py): the kernel reads padded copies of f1/f2 made in
# setup (each variant pads to its own tile), so a refill of f1/f2 cannot reach what the kernel reads.
INPUTS = ()
