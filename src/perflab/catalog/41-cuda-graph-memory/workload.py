"""cuda-graph-memory: the slow workload (its measure is GPU memory, not time).

A serving-style decode step for a Llama-3.2-1B-shaped model (hidden 2048, 16 layers, 32 heads / 8 KV
heads, intermediate 8192, vocab 128256; random weights) with fp8 weight-only linears (the
dequantize-then-matmul path of the fp8-weight-only puzzle). As vLLM and SGLang do, the decode step is
captured as a CUDA graph for every batch size the server may see (1..16), each capture with
`torch.cuda.graph(g)` and nothing else: every capture gets its own private memory pool. step() serves
one round of requests of mixed batch sizes by replaying the graph of each size.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state``; ``step(state)`` -> the logits of every
request of the round, concatenated ([sum of batch sizes, vocab] bf16). On the CPU (smoke runs) the
steps run eagerly on a tiny model.
"""
from __future__ import annotations

import os

MAX_BATCH = 16
POSITION = 16
ROUND = (1, 5, 13)  # the batch sizes of one serving round


def config(device: str) -> dict:
    from perflab.workloads import llama

    if str(device).startswith("cpu") or os.environ.get("PERFLAB_SMOKE", "0") != "0":
        return dict(llama.SMOKE)
    return dict(llama.LLAMA_3_2_1B)


def _requests(cfg: dict, device: str, seed: int) -> list:
    import torch

    gen = torch.Generator().manual_seed(int(seed) + 1)
    return [torch.randint(0, cfg["vocab"], (b, 1), generator=gen).to(device) for b in ROUND]


def setup(device: str, seed: int) -> dict:
    return build(device, seed, range(1, MAX_BATCH + 1))


def build(device: str, seed: int, captured, pool=None) -> dict:
    """The model, one round of requests and a graph per batch size in `captured`, each in its own private
    memory pool unless `pool` names one they share."""
    import torch

    from perflab.workloads import fp8, llama

    cfg = config(device)
    model = llama.build(cfg, device, seed, batch=MAX_BATCH, max_seq=32)
    llama.swap_linears(model, fp8.make_dequant_linear)
    state = {"model": model, "requests": _requests(cfg, device, seed), "graphs": {}}
    if str(device).startswith("cuda"):
        torch.cuda.empty_cache()
        for b in captured:
            state["graphs"][b] = _capture(model, b, device, pool)
    return state


def _capture(model, batch: int, device: str, pool=None) -> dict:
    import torch

    tokens = torch.zeros(batch, 1, dtype=torch.long, device=device)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.inference_mode():
        model(tokens, POSITION)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.inference_mode(), torch.cuda.graph(graph, pool=pool):
        out = model(tokens, POSITION)
    return {"graph": graph, "tokens": tokens, "out": out}


def step(state: dict):
    import torch

    outs = []
    with torch.inference_mode():
        for req in state["requests"]:
            g = state["graphs"].get(req.shape[0])
            if g is None:  # CPU
                outs.append(state["model"](req, POSITION))
                continue
            g["tokens"].copy_(req)
            g["graph"].replay()
            outs.append(g["out"].clone())
        return torch.cat(outs)


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("requests",)


def refill(state: dict, seed: int) -> None:
    """New token ids over the vocabulary in every request of the round."""
    from perflab.workloads import fresh

    vocab = config(str(state["requests"][0].device))["vocab"]
    for i, req in enumerate(state["requests"]):
        fresh.randint_(req, seed * 31 + i, 0, vocab)
