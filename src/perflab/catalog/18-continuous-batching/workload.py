"""continuous-batching: the slow workload.

An LLM server with static batching. 96 requests are waiting (a burst: all arrive at once), each a 64-token
prompt and a fixed number of tokens to generate, 8 to 256, long-tailed: most answers are short, a few are
long (`serving.output_lengths`, drawn once from LENGTH_SEED, the same stream on every run). The model is a
Llama-shaped decoder with random weights: Llama-3.2-1B's layer shapes (hidden 2048, 32 query and 8 KV
heads of 64, MLP 8192, vocab 128,256), one layer of them, bf16 (perflab/workloads/llama.py). Greedy decode.

The engine (perflab/workloads/serving.py) owns a KV cache of 16 slots and two CUDA graphs:
``engine.prefill(r, s)`` runs request r's prompt into slot s and gives its first token; ``engine.decode()``
runs one forward of all 16 slots and gives every slot's next token. This file is the scheduler: take 16
requests, prefill them, decode until the longest of them has all its tokens (slots whose request is done
keep computing tokens nobody reads), then take the next 16.

One step serves the whole stream and returns every request's tokens: [96, 256] int64, -1 after a
request's end. On device "cpu" the same code runs at SMOKE_SIZE (a tiny model, 12 requests, 4 slots).

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> tensor``; the state
holds the engine under "engine" (the recording reads its log: when each request got its tokens).
"""
from __future__ import annotations

from perflab.workloads import llama, serving, sizes

SIZE = {"model": "LLAMA_3_2_1B", "layers": 1, "slots": 16, "requests": 96, "prompt": 64,
        "min_new": 8, "max_new": 256}
SMOKE_SIZE = {"model": "SMOKE", "layers": 1, "slots": 4, "requests": 12, "prompt": 4, "min_new": 2, "max_new": 24}
LENGTH_SEED = 4     # the stream whose static/continuous cost ratio is the median of seeds 0..9 (README)


def lengths(size: dict) -> list[int]:
    """Each request's output length: the same stream whatever the seed of the weights and prompts."""
    return serving.output_lengths(size["requests"], size["min_new"], size["max_new"], LENGTH_SEED)


def _build(device: str, seed: int) -> dict:
    """Model, prompts and engine, drawn on the device from ``seed``; CUDA graphs on a GPU."""
    import torch

    size = sizes.pick(device, SIZE, SMOKE_SIZE)
    cfg = dict(getattr(llama, size["model"]), layers=size["layers"])
    out_lens = lengths(size)
    model = llama.build(cfg, device, seed, batch=size["slots"], max_seq=size["prompt"] + max(out_lens))
    gen = torch.Generator(device=device).manual_seed(int(seed) + 1)
    prompts = torch.randint(0, cfg["vocab"], (size["requests"], size["prompt"]), generator=gen, device=device)
    engine = serving.Engine(model, prompts, out_lens, size["slots"], graphs=str(device).startswith("cuda"))
    return {"size": size, "engine": engine}


def setup(device: str, seed: int) -> dict:
    return _build(device, seed)


def serve(engine: serving.Engine) -> None:
    """Static batching: a batch of `slots` requests at a time, each batch decoded to its longest request."""
    waiting = list(range(len(engine.lengths)))
    while waiting:
        batch, waiting = waiting[:engine.slots], waiting[engine.slots:]
        for slot, request in enumerate(batch):
            engine.prefill(request, slot)
        while not all(engine.finished(r) for r in batch):
            engine.decode()                      # every slot computes a token, its request done or not
        for slot in range(len(batch)):
            engine.release(slot)


def step(state: dict):
    return state["engine"].serve(serve)   # the whole stream, from the start


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("engine",)


def refill(state: dict, seed: int) -> None:
    """New prompts (token ids over the vocabulary) in the engine's prompt table; the output lengths stay."""
    from perflab.workloads import fresh

    engine = state["engine"]
    fresh.randint_(engine.prompts, seed, 0, getattr(llama, state["size"]["model"])["vocab"])
