"""A small Triton GEMM for the autotune puzzle: C[M, N] = A[M, K] @ W[N, K]^T (bf16 in, fp32 accumulate,
bf16 out; W laid out like nn.Linear's weight). The variant files wrap `matmul_kernel` in
`triton.autotune` themselves: which configurations and which key is the puzzle.

`quick_bench` keeps each autotuning measurement short (Triton's default spends ~125 ms per config).
"""
from __future__ import annotations

from typing import Any

import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a_ptr, w_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_wn, stride_wk, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    w_ptrs = w_ptr + offs_k[:, None] * stride_wk + offs_n[None, :] * stride_wn      # W^T tile [BLOCK_K, BLOCK_N]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_left = K - k0
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        w = tl.load(w_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, w, acc)
        a_ptrs += BLOCK_K * stride_ak
        w_ptrs += BLOCK_K * stride_wk
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(tl.bfloat16), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def grid(M: int, N: int):
    return lambda meta: (triton.cdiv(M, meta["BLOCK_M"]), triton.cdiv(N, meta["BLOCK_N"]))


def args(a: Any, w: Any, c: Any) -> tuple:
    """The kernel's positional arguments for C = A @ W^T."""
    M, K = a.shape
    N = w.shape[0]
    return (a, w, c, M, N, K, a.stride(0), a.stride(1), w.stride(0), w.stride(1), c.stride(0), c.stride(1))


def quick_bench(fn, quantiles=None):
    return triton.testing.do_bench(fn, warmup=5, rep=25, quantiles=quantiles)


def launch(kernel: Any, a: Any, w: Any, c: Any) -> Any:
    """C = A @ W^T with `kernel` (an autotuned wrapper of matmul_kernel, or matmul_kernel with meta-parameters)."""
    kernel[grid(a.shape[0], w.shape[0])](*args(a, w, c))
    return c


def launch_with(a: Any, w: Any, c: Any, meta: dict[str, Any]) -> Any:
    """C = A @ W^T with matmul_kernel under fixed meta-parameters (a config's all_kwargs())."""
    matmul_kernel[grid(a.shape[0], w.shape[0])](*args(a, w, c), **meta)
    return c
