"""chunked-prefill: the slow workload.

An LLM server with continuous batching (the fix of continuous-batching) serving a stream of long prompts.
Every request carries a long context, a 4,096-token prompt (retrieved documents and a question), and wants a
short answer, 16 to 128 tokens, long-tailed (`serving.output_lengths`, drawn once from LENGTH_SEED). The
requests do not come at once: request 0 is there at the start, then one more arrives every 10 decoding
forwards (`size["gap"]`) (the engine's clock: `engine.arrived(r)`, `engine.waiting()`), so new prompts keep coming
while earlier requests decode. The model is a Llama-shaped decoder with random weights: Llama-3.2-1B's layer
shapes (hidden 2048, 32 query and 8 KV heads of 64, MLP 8192, vocab 128,256), four layers of them, bf16
(perflab/workloads/llama.py). Each request decodes its given answer (teacher-forced), so that the schedule
cannot change what it computes.

The engine (perflab/workloads/serving.py) owns a KV cache of 16 slots and three CUDA graphs:
``engine.prefill(r, s)`` runs request r's whole prompt into slot s (one forward of 4,096 tokens) and gives
its first token; ``engine.decode()`` runs one forward of all 16 slots, every live request's next token;
``engine.mixed(r, s)`` runs both at once: every slot's decode row and the next ``engine.chunk`` tokens of
request r's prompt into slot s (one forward of 16 + 512 rows); the forward that takes the prompt's last chunk
gives r its first token. This file is the scheduler: whenever a request waits and a slot is free, prefill it,
then decode all slots; repeat until every request has its answer.

One step serves the whole stream and returns every request's per-token scores ([48, 128] float32: each
token's top logit, NaN after a request's end). On device "cpu" the same code runs at SMOKE_SIZE (a tiny model,
10 requests of 16-token prompts in chunks of 4, 4 slots).

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> tensor``; the state
holds the engine under "engine" (the recording reads its log: when each request arrived and got its tokens,
and what every forward carried).
"""
from __future__ import annotations

from perflab.workloads import serving, sizes

SIZE = {"model": "LLAMA_3_2_1B", "layers": 4, "slots": 16, "requests": 48, "prompt": 4096, "chunk": 512,
        "min_new": 16, "max_new": 128, "gap": 10}
SMOKE_SIZE = {"model": "SMOKE", "layers": 1, "slots": 4, "requests": 10, "prompt": 16, "chunk": 4,
              "min_new": 2, "max_new": 12, "gap": 5}
LENGTH_SEED = 7
# size["gap"]: more decoding forwards than a prompt has chunks (4,096 / 512 = 8), so a schedule that
# prefills one chunk per forward keeps up with the arrivals (else its queue, and every TTFT, would grow)


def lengths(size: dict) -> list[int]:
    """Each request's answer length: the same stream whatever the seed of the weights and prompts."""
    return serving.output_lengths(size["requests"], size["min_new"], size["max_new"], LENGTH_SEED)


def arrivals(size: dict) -> list[int]:
    """Request r arrives after r * gap decoding forwards (request 0 at the start)."""
    return [r * size["gap"] for r in range(size["requests"])]


def _build(device: str, seed: int) -> dict:
    """Model, prompts, answers and engine, drawn on the device from ``seed``; CUDA graphs on a GPU."""
    size = sizes.pick(device, SIZE, SMOKE_SIZE)
    engine = serving.build_engine(size, device, seed, lengths(size), arrivals(size))
    return {"size": size, "engine": engine}


def setup(device: str, seed: int) -> dict:
    return _build(device, seed)


def busy(engine: serving.Engine) -> bool:
    """Some request is admitted and not done, or one is still to come."""
    return any(not engine.finished(r) for r in range(len(engine.lengths)))


def free_slots(engine: serving.Engine) -> list[int]:
    return [s for s, r in enumerate(engine.occupant) if r is None or engine.finished(r)]


def serve(engine: serving.Engine) -> None:
    """Continuous batching with whole-prompt prefills: every waiting request that finds a free slot is prefilled
    (one forward of its whole prompt, while every running request waits), then one decode forward of all slots."""
    while busy(engine):
        for request, slot in zip(engine.waiting(), free_slots(engine)):
            engine.release(slot)
            engine.prefill(request, slot)
        engine.decode()            # no request running: the server idles one forward until the next arrives


def step(state: dict):
    return state["engine"].serve(serve)   # the whole stream, from the start


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("engine",)


def refill(state: dict, seed: int) -> None:
    """New prompts and answers (token ids over the vocabulary) in the engine; lengths and arrivals stay."""
    state["engine"].refill(seed)
