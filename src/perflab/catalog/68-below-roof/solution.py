"""below-roof: the reference solution.

Same weights, same bias, same inputs, same result (up to bf16 rounding: the bias is added in the GEMM's
epilogue in fp32 instead of as a 4097th product term). The bias stays a vector: W [4096, 4096] and b [4096]
are split out of the workload's W_aug once in setup(), and the step is F.linear(x, W, b): one cuBLAS GEMM
with the bias add fused into its epilogue, and no concatenation.

Why it is faster: the bias trick made the inner dimension K = 4097. A row of x_aug or of W_aug is then
8194 bytes and row i starts at byte 8194 i: only every 8th row on a 16-byte boundary. cuBLAS's fast Hopper
kernels (nvjet: TMA tile copies into shared memory, then wgmma) need every row stride to be a multiple of
16 bytes (TMA's rule), and the older tensor-core kernels load 16 bytes per thread, which needs the same.
With K = 4097 no vector load wider than 2 bytes can start every row, so cuBLAS falls back to kernels that
load their operands one element per instruction, and those loads, not the tensor cores, set the speed. The
trace can only say that the GEMM runs far below the bf16 roof; Nsight Compute shows why (the kernel cuBLAS
picked, its instruction mix and how it loads its operands, against the fixed kernel's TMA copies).
Padding K to a multiple of 8 elements (x_aug = [x | 1 | 0 ... 0], W_aug = [W | b | 0 ... 0], K = 4104)
would restore the fast kernels too; keeping the bias out of the GEMM also saves the concatenation.
"""
from __future__ import annotations

from perflab.workloads import siblings

_w = siblings.load(__file__, "68-below-roof")   # this puzzle's workload.py: the data the fix keeps


def setup(device: str, seed: int) -> dict:
    state = _w.setup(device, seed)
    w_aug = state.pop("w_aug")
    state["w"] = w_aug[:, :-1].contiguous()    # [d_out, d_in]: rows of 8192 bytes, 16-byte aligned
    state["b"] = w_aug[:, -1].contiguous()     # [d_out]
    return state


def step(state: dict):
    import torch
    import torch.nn.functional as F

    with torch.no_grad():
        return F.linear(state["x"], state["w"], state["b"])   # one GEMM, the bias added in its epilogue
