"""autotune: the slow workload.

A serving process with one projection, y = x @ W^T (bf16, W [8192, 8192] like nn.Linear's weight),
run by an in-project Triton GEMM under `triton.autotune`. At start-up it serves a prefill batch
(M = 4096 tokens): the autotuner benchmarks its configs on that shape and caches the winner under
its key. Then it decodes: every step is the same GEMM with M = 16 tokens. The key is ["N", "K"]:
M is not in it, so decode reuses the prefill winner, a 128x256 tile, on a 16-row problem: 7/8 of
each tile's rows are padding and the 8192 columns make only 32 thread blocks for 132 SMs.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state``, ``step(state) -> out`` ([16, 8192] bf16).
For the autotuning log (perflab.puzzles.evidence.autotune): ``TUNED`` and ``tuned_calls(state)``.
"""
from __future__ import annotations

import triton

from perflab.workloads import triton_gemm

PREFILL_M, DECODE_M, N, K = 4096, 16, 8192, 8192

CONFIGS = [
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}, num_warps=4, num_stages=4),
    triton.Config({"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 256}, num_warps=4, num_stages=4),
    triton.Config({"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 256}, num_warps=4, num_stages=4),
]

# TODO: which shapes share a cached config under this key? (perflab answer autotune, artifacts/*.autotune.json)
matmul = triton.autotune(configs=CONFIGS, key=["N", "K"], do_bench=triton_gemm.quick_bench)(triton_gemm.matmul_kernel)
TUNED = matmul


def _inputs(device: str, seed: int):
    import torch

    gen = torch.Generator(device=device).manual_seed(int(seed))
    w = (torch.randn(N, K, generator=gen, device=device) / K ** 0.5).to(torch.bfloat16)
    prefill = torch.randn(PREFILL_M, K, generator=gen, device=device).to(torch.bfloat16)
    x = torch.randn(DECODE_M, K, generator=gen, device=device).to(torch.bfloat16)
    return w, prefill, x


def setup(device: str, seed: int) -> dict:
    import torch

    w, prefill, x = _inputs(device, seed)
    state = {"w": w, "prefill": prefill, "x": x, "out": torch.empty(DECODE_M, N, device=device, dtype=torch.bfloat16),
             "prefill_out": torch.empty(PREFILL_M, N, device=device, dtype=torch.bfloat16)}
    triton_gemm.launch(matmul, prefill, w, state["prefill_out"])   # start-up: the autotuner tunes here
    return state


def step(state: dict):
    return triton_gemm.launch(matmul, state["x"], state["w"], state["out"])     # decode: M = 16


def reference_state(state: dict):
    """What step() must return (torch's matmul; the GPU tests compare at bf16 tolerance)."""
    return (state["x"].float() @ state["w"].float().t()).to(state["out"].dtype)


def tuned_calls(state: dict) -> list:
    w = state["w"]
    return [
        ("prefill", {"M": PREFILL_M, "N": N, "K": K},
         lambda: triton_gemm.launch(matmul, state["prefill"], w, state["prefill_out"]),
         lambda meta: triton_gemm.launch_with(state["prefill"], w, state["prefill_out"], meta)),
        ("decode", {"M": DECODE_M, "N": N, "K": K},
         lambda: triton_gemm.launch(matmul, state["x"], w, state["out"]),
         lambda meta: triton_gemm.launch_with(state["x"], w, state["out"], meta)),
    ]


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("x",)  # the decode activations; w is the weight
