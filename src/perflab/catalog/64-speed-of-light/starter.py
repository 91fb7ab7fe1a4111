"""speed-of-light: your starting point (the slow server's step; the model comes from workload.py).

What to do
----------
This adapter server is correct but slow, and the team is about to spend a month on a hand-written fused
Triton kernel for the MLP. Before anyone writes a kernel, read the evidence: `perflab show
speed-of-light`, `perflab run speed-of-light`, `perflab hint speed-of-light 1`, and the ceilings
`perflab bench` measured on the recording's H100 (artifacts/ceilings.json, matmul_bf16).

Rules: keep the interface, the model (``forward``: bf16, same weights, same GELU) and the N requests;
return the N outputs [N, 32, 8192] bf16 in request order. Keep a path for device "cpu".

Goal: one step (N requests) at least 3x faster on the GPU, with the launch-overhead finding gone. Check
it on a GPU machine with

    perflab check speed-of-light

Then answer the real question: how far from the hardware's ceiling is your fix, and what is a custom
kernel still worth? (`perflab answer speed-of-light`)

The workload
------------
An embedding adapter served one request at a time. The model is a bottleneck MLP on 8192-wide bf16
embeddings, y = W2 gelu(W1 x + b1) + b2 (8192 -> 2048 -> 8192, 33.6 M parameters, 64 MiB in bf16).
Every step, N=1024 requests are waiting, each with 32 embeddings (``state["requests"]`` [N, 32, 8192]
bf16); the server runs the model on each request separately, in a Python loop, and returns all the
outputs [N, 32, 8192] bf16 in request order. The model, the weights and the requests come from
workload.py (``setup``, ``forward``; ``gemm_flop_per_step(size)`` there counts one step's FLOPs).

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> tensor``.
"""
from __future__ import annotations

from perflab.puzzles.engine import catalog, runner

# The model, the weights and the requests: this puzzle's workload.py (the slow server), unchanged.
_w = runner.load_module(catalog.find(catalog.load_catalog([catalog.BUILTIN]), "speed-of-light").file("slow"))
setup, forward = _w.setup, _w.forward   # setup(device, seed) -> state; forward(state, x [B, 8192]) -> [B, 8192]


def step(state: dict):
    import torch

    with torch.no_grad():
        return torch.stack([forward(state, x) for x in state["requests"]])   # one request at a time
