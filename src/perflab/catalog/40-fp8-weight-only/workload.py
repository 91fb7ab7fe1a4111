"""fp8-weight-only: the slow workload.

One decode step (one new token, batch 1, bf16 activations) of a Llama-3.2-3B-shaped model (hidden
3072, 28 layers, 24 heads / 8 KV heads, intermediate 8192, vocab 128256; random weights) whose linear
weights are stored in float8_e4m3fn with a bf16 scale per output row: fp8 weight-only quantization.
Every linear dequantizes its whole weight to bf16 (a conversion kernel, then a scaling kernel) and
then runs a bf16 GEMM, on every call: the pattern of torchao's Float8WeightOnlyConfig without a fused
kernel. As in gpt-fast's compiled decode (torch.compile mode="reduce-overhead"), the whole decode step
is captured once as a CUDA graph and replayed, so CPU launch overhead is out of the picture and the
GPU's own work is what a step costs. The layer code is perflab/workloads/llama.py; the fp8 linear is
perflab/workloads/fp8.py.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> logits``
([1, vocab] bf16). On device "cpu" (or PERFLAB_SMOKE=1) a tiny model of the same structure is used.
"""
from __future__ import annotations

import os

POSITION = 32  # the decode position: the KV cache holds 32 earlier (random) tokens


def config(device: str) -> dict:
    from perflab.workloads import llama

    if str(device).startswith("cpu") or os.environ.get("PERFLAB_SMOKE", "0") != "0":
        return dict(llama.SMOKE)
    return dict(llama.LLAMA_3_2_3B)


def setup(device: str, seed: int) -> dict:
    import torch

    from perflab.workloads import fp8, llama

    cfg = config(device)
    model = llama.build(cfg, device, seed)
    llama.swap_linears(model, fp8.make_dequant_linear)
    if str(device).startswith("cuda"):
        torch.cuda.empty_cache()  # the bf16 weights the model was built from are gone
    gen = torch.Generator().manual_seed(int(seed) + 1)
    tokens = torch.randint(0, cfg["vocab"], (1, 1), generator=gen).to(device)
    state = {"model": model, "tokens": tokens, "pos": POSITION, "graph": None}
    if str(device).startswith("cuda"):
        state["graph"], state["out"] = llama.capture_decode(model, tokens, POSITION)
    return state


def step(state: dict):
    import torch

    if state["graph"] is not None:
        state["graph"].replay()
        return state["out"]
    with torch.no_grad():
        return state["model"](state["tokens"], state["pos"])


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("tokens",)


def refill(state: dict, seed: int) -> None:
    """A new decode token over the vocabulary (the graph reads state["tokens"] in place)."""
    from perflab.workloads import fresh

    fresh.randint_(state["tokens"], seed, 0, config(str(state["tokens"].device))["vocab"])
