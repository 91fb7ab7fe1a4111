"""serving-trace: the slow workload.

An LLM server built like vLLM: continuous batching, and an engine that schedules every iteration (one forward pass)
by a token budget: every running request's next token, plus the prompt tokens of a request being admitted, up to
`size["chunk"]` of them per iteration. The server was configured for throughput: the chunk is the whole prompt
(vLLM: `--max-num-batched-tokens` at least the longest prompt), so a new prompt is prefilled in one iteration, beside
the decodes of every running request.

Every request carries a 4,096-token prompt (retrieved documents and a question) and wants a short answer, 16 to 128
tokens, long-tailed (`serving.output_lengths`, drawn once from LENGTH_SEED); request 0 is there at the start, then one
more arrives every 10 decoding iterations (`size["gap"]`; the engine's clock: `engine.arrived(r)`,
`engine.waiting()`). The model is a Llama-shaped decoder with random weights: Llama-3.2-1B's layer shapes (hidden 2048,
32 query and 8 KV heads of 64, MLP 8192, vocab 128,256), four layers of them, bf16 (perflab/workloads/llama.py). Each
request decodes its given answer (teacher-forced), so that the schedule cannot change what it computes.

The engine (perflab/workloads/serving.py) owns a KV cache of 16 slots and runs each iteration as a CUDA graph:
``engine.decode()`` runs every slot's decode row; ``engine.mixed(r, s)`` runs every slot's decode row and the next
``engine.chunk`` tokens of request r's prompt into slot s; the iteration that takes the prompt's last chunk gives r its
first token. Each iteration runs inside a profiler range named as vLLM names its own,
``execute_context_N(T)_generation_M(G)``: N requests prefilling T prompt tokens, M requests decoding G tokens.

One step serves the whole stream and returns every request's per-token scores ([12, 46] float32: each token's top
logit, NaN after a request's end). On device "cpu" the same code runs at SMOKE_SIZE (a tiny model, 6 requests of
16-token prompts, 3 slots).

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> tensor``; the state holds the
engine under "engine".
"""
from __future__ import annotations

from perflab.workloads import serving, sizes

SIZE = {"model": "LLAMA_3_2_1B", "layers": 4, "slots": 16, "requests": 12, "prompt": 4096, "chunk": 4096,
        "min_new": 16, "max_new": 128, "gap": 10}
SMOKE_SIZE = {"model": "SMOKE", "layers": 1, "slots": 3, "requests": 6, "prompt": 16, "chunk": 16,
              "min_new": 2, "max_new": 10, "gap": 5}
LENGTH_SEED = 7


def lengths(size: dict) -> list[int]:
    """Each request's answer length: the same stream whatever the seed of the weights and prompts."""
    return serving.output_lengths(size["requests"], size["min_new"], size["max_new"], LENGTH_SEED)


def arrivals(size: dict) -> list[int]:
    """Request r arrives after r * gap decoding iterations (request 0 at the start)."""
    return [r * size["gap"] for r in range(size["requests"])]


def build(device: str, seed: int, chunk: int | None = None) -> dict:
    """Model, prompts, answers and engine, drawn on the device from ``seed``; CUDA graphs on a GPU. `chunk`: the most
    prompt tokens one iteration prefills (default: the size's, the whole prompt)."""
    size = sizes.pick(device, SIZE, SMOKE_SIZE)
    if chunk is not None:
        size["chunk"] = int(chunk)
    engine = serving.build_engine(size, device, seed, lengths(size), arrivals(size))
    return {"size": size, "engine": engine}


def setup(device: str, seed: int) -> dict:
    return build(device, seed)


def serve(engine: serving.Engine) -> None:
    """The engine's scheduler: one request's prompt at a time, engine.chunk prompt tokens per iteration beside every
    running request's decode row; an iteration with no prompt to prefill only decodes."""
    filling = None                                   # (request, slot) whose prompt is being prefilled
    while engine.busy():
        if filling is None:
            waiting, free = engine.waiting(), engine.free_slots()
            if waiting and free:
                engine.release(free[0])
                filling = (waiting[0], free[0])
        if filling is None:
            engine.decode()          # no request running: the server idles one iteration until the next arrives
            continue
        engine.mixed(*filling)
        if engine.prefilled[filling[0]] == engine.prompt_len:
            filling = None


def step(state: dict):
    return state["engine"].serve(serve)   # the whole stream, from the start


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("engine",)


def refill(state: dict, seed: int) -> None:
    """New prompts and answers (token ids over the vocabulary) in the engine; lengths and arrivals stay."""
    state["engine"].refill(seed)
