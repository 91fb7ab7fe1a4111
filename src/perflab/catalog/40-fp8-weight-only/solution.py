"""fp8-weight-only: the reference solution.

The weights stay float8_e4m3fn + a bf16 scale per output row, and the maths is the slow path's
(y = x @ (bf16(w_fp8) * scale).T, the product rounded to bf16 as the slow path stores it), but a
Triton GEMV reads the fp8 weight and the scale inside the kernel: each weight byte is read once
(1 byte/parameter instead of 1 + 2 + 2 + 2 + 2 for convert, scale and a bf16 GEMM), no bf16 copy
of the weight ever exists. The decode step stays one CUDA graph, as in the slow workload.
On the CPU (smoke runs) the same maths runs in PyTorch.
"""
from __future__ import annotations

from perflab.workloads import siblings

_w = siblings.load(__file__, "40-fp8-weight-only")   # this puzzle's workload.py: what the fix keeps
POSITION, config = _w.POSITION, _w.config

USE_CUDA_GRAPH = True

_kernel = None


def _fp8_gemv_kernel():
    """y[m, n] = sum_k x[m, k] * bf16(float(w[n, k]) * scale[n]), one program per (BLOCK_N rows, m).

    Autotuned per (N, K) over a few tile shapes: decode GEMVs are memory-bound, so the tile is chosen
    for bytes in flight per SM, not for FLOPs."""
    global _kernel
    if _kernel is None:
        import triton
        import triton.language as tl

        configs = [triton.Config({"BLOCK_N": bn, "BLOCK_K": bk}, num_warps=w, num_stages=st)
                   for bn, bk, w, st in ((4, 1024, 4, 3), (8, 512, 4, 3), (8, 1024, 8, 3), (16, 512, 8, 3),
                                         (16, 256, 4, 4), (32, 256, 8, 3))]

        @triton.autotune(configs=configs, key=["N", "K"], warmup=5, rep=20)  # short: 6 shapes x 6 configs
        @triton.jit
        def fp8_gemv(x_ptr, w_ptr, s_ptr, y_ptr, N, K, stride_xm, stride_wn, stride_ym,
                     BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
            pid_n = tl.program_id(0)
            m = tl.program_id(1)
            rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            rk = tl.arange(0, BLOCK_K)
            n_ok = rn < N
            s = tl.load(s_ptr + rn, mask=n_ok, other=0.0).to(tl.float32)
            acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
            for k0 in range(0, K, BLOCK_K):
                kk = k0 + rk
                k_ok = kk < K
                x = tl.load(x_ptr + m * stride_xm + kk, mask=k_ok, other=0.0).to(tl.float32)
                w = tl.load(w_ptr + rn[:, None] * stride_wn + kk[None, :], mask=n_ok[:, None] & k_ok[None, :],
                            other=0.0)
                w = (w.to(tl.float32) * s[:, None]).to(tl.bfloat16).to(tl.float32)  # the slow path's rounding
                acc += tl.sum(w * x[None, :], axis=1)
            tl.store(y_ptr + m * stride_ym + rn, acc.to(tl.bfloat16), mask=n_ok)

        _kernel = fp8_gemv
    return _kernel


def fp8_linear(x, weight_fp8, scale):
    """x [..., K] bf16 @ fp8 weight [N, K] with per-row scale [N, 1] -> [..., N] bf16."""
    import torch

    n, k = weight_fp8.shape
    if not x.is_cuda:  # the same maths, in PyTorch
        w = weight_fp8.to(x.dtype) * scale
        return torch.nn.functional.linear(x, w)
    x2 = x.reshape(-1, k).contiguous()
    y = torch.empty((x2.shape[0], n), device=x.device, dtype=torch.bfloat16)
    kernel = _fp8_gemv_kernel()
    grid = lambda meta: (triton_cdiv(n, meta["BLOCK_N"]), x2.shape[0])  # noqa: E731
    kernel[grid](x2, weight_fp8, scale, y, n, k, x2.stride(0), weight_fp8.stride(0), y.stride(0))
    return y.reshape(*x.shape[:-1], n)


def triton_cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def make_linear(linear):
    from torch import nn

    from perflab.workloads.fp8 import quantize_rows

    class Fp8FusedLinear(nn.Module):
        def __init__(self, lin):
            super().__init__()
            q, s = quantize_rows(lin.weight)
            self.register_buffer("weight_fp8", q.contiguous())
            self.register_buffer("scale", s.contiguous())

        def forward(self, x):
            return fp8_linear(x, self.weight_fp8, self.scale)

    return Fp8FusedLinear(linear)


def setup(device: str, seed: int) -> dict:
    import torch

    from perflab.workloads import llama

    cfg = config(device)
    model = llama.build(cfg, device, seed)
    llama.swap_linears(model, make_linear)
    gen = torch.Generator().manual_seed(int(seed) + 1)
    tokens = torch.randint(0, cfg["vocab"], (1, 1), generator=gen).to(device)
    state = {"model": model, "tokens": tokens, "pos": POSITION, "graph": None}
    if str(device).startswith("cuda"):
        torch.cuda.empty_cache()
        if USE_CUDA_GRAPH:
            state["graph"], state["out"] = llama.capture_decode(model, tokens, POSITION)
    return state


step = _w.step   # the same decode as workload.py, through this file's linears
