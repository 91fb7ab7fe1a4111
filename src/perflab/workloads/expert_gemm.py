"""Per-expert GEMMs for the streams-concurrency puzzle (catalog/15-streams-concurrency).

`expert_gemm(x, w, y, experts=...)`: Y[e] = act(X[e] @ W[e]^T) for the experts e in a range, bf16 in,
fp32 accumulate, bf16 out (W[e] laid out like nn.Linear's weight), optional GELU (tanh form) in the
epilogue. One launch covers `experts` experts through the grid's third dimension: one expert per
launch is what a loop over experts issues; all experts in one launch is the batched form. The tile is
fixed (TILE), so the number of thread blocks is known: ceil(T / BLOCK_M) x ceil(N / BLOCK_N) per expert.

Triton is imported on first use (a CPU-only install need not have it); on the CPU `expert_gemm`
computes the same with torch.
"""
from __future__ import annotations

from typing import Any

TILE = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3}
SQRT_2_OVER_PI = 0.7978845608028654


def blocks(tokens: int, n: int) -> int:
    """Thread blocks one expert's GEMM launches with TILE."""
    return -(-tokens // TILE["BLOCK_M"]) * -(-n // TILE["BLOCK_N"])


def _kernel() -> Any:
    from perflab.workloads.expert_gemm_kernel import expert_gemm_kernel

    return expert_gemm_kernel


def _torch_reference(x: Any, w: Any, gelu: bool) -> Any:
    import torch

    acc = torch.matmul(x.float(), w.float().transpose(-1, -2))
    if gelu:
        acc = 0.5 * acc * (1.0 + torch.tanh(SQRT_2_OVER_PI * (acc + 0.044715 * acc ** 3)))
    return acc


def expert_gemm(x: Any, w: Any, y: Any, *, first: int = 0, experts: int = 1, gelu: bool = False) -> Any:
    """y[e] = act(x[e] @ w[e]^T) for e in [first, first + experts); x [E, T, K], w [E, N, K], y [E, T, N]."""
    if not x.is_cuda:
        sl = slice(first, first + experts)
        y[sl].copy_(_torch_reference(x[sl], w[sl], gelu))
        return y
    _, t, k = x.shape
    n = w.shape[1]
    grid = (-(-t // TILE["BLOCK_M"]), -(-n // TILE["BLOCK_N"]), experts)
    _kernel()[grid](x, w, y, t, n, k, first, *x.stride(), *w.stride(), *y.stride(), GELU=gelu, **TILE)
    return y
