"""autotune: the reference solution. One word: the key includes M, so decode (M = 16) gets its
own tuning run and its own winner (a 16-row tile, 128+ thread blocks) instead of the prefill's
128x256 tile. (Bucketing M, e.g. by powers of two, keeps the number of tuning runs small in a
server with many batch sizes; GemLite does that.)

The slow version: see workload.py's docstring.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state``, ``step(state) -> out`` ([16, 8192] bf16).
For the autotuning log (perflab.puzzles.evidence.autotune): ``TUNED`` and ``tuned_calls(state)``.
"""
from __future__ import annotations

import triton

from perflab.workloads import siblings, triton_gemm

_w = siblings.load(__file__, "42-autotune")   # this puzzle's workload.py: what the fix keeps
CONFIGS, _inputs, reference_state = _w.CONFIGS, _w._inputs, _w.reference_state

PREFILL_M, DECODE_M, N, K = 4096, 16, 8192, 8192


# M in the key: every M gets its own tuning run and cached config.
matmul = triton.autotune(configs=CONFIGS, key=["M", "N", "K"], do_bench=triton_gemm.quick_bench)(triton_gemm.matmul_kernel)
TUNED = matmul


# setup, step and tuned_calls as in workload.py, written out here: they must launch this file's `matmul` (the new key).
def setup(device: str, seed: int) -> dict:
    import torch

    w, prefill, x = _inputs(device, seed)
    state = {"w": w, "prefill": prefill, "x": x, "out": torch.empty(DECODE_M, N, device=device, dtype=torch.bfloat16),
             "prefill_out": torch.empty(PREFILL_M, N, device=device, dtype=torch.bfloat16)}
    triton_gemm.launch(matmul, prefill, w, state["prefill_out"])   # start-up: the autotuner tunes here
    return state


def step(state: dict):
    return triton_gemm.launch(matmul, state["x"], state["w"], state["out"])     # decode: M = 16


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
