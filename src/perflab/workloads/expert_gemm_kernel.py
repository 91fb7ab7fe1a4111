"""The Triton kernel behind perflab.workloads.expert_gemm (imported on first GPU use: it needs triton)."""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit(do_not_specialize=["e0"])
def expert_gemm_kernel(x_ptr, w_ptr, y_ptr, T, N, K, e0,
                       sx_e, sx_t, sx_k, sw_e, sw_n, sw_k, sy_e, sy_t, sy_n,
                       GELU: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Y[e] = act(X[e] @ W[e]^T) for e = e0 + program_id(2): one [BLOCK_M, BLOCK_N] tile per program."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    e = e0 + tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + e * sx_e + offs_m[:, None] * sx_t + offs_k[None, :] * sx_k
    w_ptrs = w_ptr + e * sw_e + offs_k[:, None] * sw_k + offs_n[None, :] * sw_n     # W^T tile [BLOCK_K, BLOCK_N]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_left = K - k0
        a = tl.load(x_ptrs, mask=(offs_m[:, None] < T) & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(w_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        x_ptrs += BLOCK_K * sx_k
        w_ptrs += BLOCK_K * sw_k
    if GELU:  # tanh form; tanh(u) = 2 sigmoid(2u) - 1
        inner = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)
        acc = 0.5 * acc * (1.0 + (2.0 * tl.sigmoid(2.0 * inner) - 1.0))
    y_ptrs = y_ptr + e * sy_e + offs_m[:, None] * sy_t + offs_n[None, :] * sy_n
    tl.store(y_ptrs, acc.to(tl.bfloat16), mask=(offs_m[:, None] < T) & (offs_n[None, :] < N))
