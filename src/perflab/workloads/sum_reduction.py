"""The optimization-loop puzzle's shared pieces: its input vector, its state and its grid size.

The kernels themselves stay in the puzzle's variant files (workload.py, stage1.py, stage2.py, solution.py),
where the learner reads them. The input holds small integers stored as fp32: every partial sum is an
integer far below 2**24, which fp32 represents exactly, so any correct kernel returns exactly the same
sum in any order of additions (fp32 atomics included) and the fix check can compare tightly.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from perflab.workloads.cuda_kernels import view

N, THREADS = 1 << 26, 256          # 64 M fp32 = 256 MB; 256 threads per block
BLOCKS_PER_SM = 4                  # the fixed kernels' grid: 4 blocks of 256 threads on every SM, one wave


def make_input(device: str, seed: int) -> Any:
    import torch

    gen = torch.Generator(device=device).manual_seed(int(seed))  # drawn on the device: fast
    return torch.randint(-7, 8, (N,), generator=gen, device=device, dtype=torch.float32)


def reference(x: Any) -> Any:
    """The exact sum (float64), what every variant must return as fp32."""
    return x.double().sum()


def new_state(device: str, seed: int, kernel: Any) -> dict:
    """The input, a one-element `out`, their CuPy views, the kernel (cuda_kernels.kernel), and `blocks`:
    BLOCKS_PER_SM per SM (the grid of the kernels that loop over the vector)."""
    import torch

    x = make_input(device, seed)
    out = torch.zeros(1, dtype=torch.float32, device=device)
    sms = torch.cuda.get_device_properties(device).multi_processor_count if str(device).startswith("cuda") else 1
    return {"x": x, "out": out, "x_cu": view(x), "out_cu": view(out), "kernel": kernel,
            "blocks": sms * BLOCKS_PER_SM}


def launch(state: dict, blocks: int) -> Any:
    """One step: out = 0, then the state's kernel (x, out, n) on `blocks` blocks of THREADS threads."""
    state["out"].zero_()
    state["kernel"]((blocks,), (THREADS,), (state["x_cu"], state["out_cu"], np.int64(N)))
    return state["out"]
