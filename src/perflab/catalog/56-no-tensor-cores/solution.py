"""no-tensor-cores: the reference solution. The same product on the tensor cores: A and B rounded
to bf16 and multiplied by cuBLAS (torch.matmul), accumulating in fp32, the result returned in fp32.
bf16 inputs change the result at the 1e-2 relative level (puzzle.toml's rtol/atol say how much is
accepted); TF32 (torch.backends.cuda.matmul.allow_tf32 = True on fp32 inputs) is the closer-to-fp32
alternative at about half the bf16 speed.

The slow version: see workload.py's docstring.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state``, ``step(state) -> out`` ([4096, 4096] fp32).
"""
from __future__ import annotations

M = N = K = 4096


def setup(device: str, seed: int) -> dict:
    import torch

    gen = torch.Generator(device=device).manual_seed(int(seed))  # drawn on the device: fast
    a = torch.rand(M, K, generator=gen, device=device) - 0.5
    b = torch.rand(K, N, generator=gen, device=device) - 0.5
    return {"a": a, "b": b, "out": torch.empty(M, N, device=device)}


def step(state: dict):
    import torch

    a16, b16 = state["a"].to(torch.bfloat16), state["b"].to(torch.bfloat16)   # two small conversion kernels
    state["out"].copy_(torch.matmul(a16, b16))    # cuBLAS on the tensor cores (fp32 accumulation), into fp32
    return state["out"]
