"""d2h-copy: the slow workload.

Constrained greedy decoding. A batch of B=64 sequences decodes T=32 tokens. Each decode step runs a
small recurrent stand-in for a language model on the GPU,

    h = tanh(h @ W_h + E[token])         # [B, D] bf16
    logits = (h @ W_out).float()         # [B, V] fp32, V = 65,536

and the next token may only be one of the K=16 ids in ``state["allowed"]`` (a structured-output
grammar: digits and separators). The sampler is host code: every decode step the full logits are
copied into a pinned host buffer, the host picks the best allowed id per sequence, and the ids go
back to the GPU for the next step. ``step`` returns the chosen ids [B, T] int64.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> tensor``.
"""
from __future__ import annotations

import math

from perflab.workloads import sizes

SIZE = {"batch": 64, "dim": 1024, "vocab": 65536, "allowed": 16, "tokens": 32}
SMOKE_SIZE = {"batch": 4, "dim": 32, "vocab": 256, "allowed": 8, "tokens": 5}


def _build(device: str, seed: int) -> dict:
    """Weights, embeddings, the allowed ids and the first token of each sequence, from ``seed``."""
    import torch

    size = sizes.pick(device, SIZE, SMOKE_SIZE)
    gen = torch.Generator(device=device).manual_seed(int(seed))     # weights: drawn on the device
    host_gen = torch.Generator().manual_seed(int(seed))              # small host-side choices
    b, d, v, k = size["batch"], size["dim"], size["vocab"], size["allowed"]

    def randn(*shape, std=1.0):
        return (torch.randn(*shape, generator=gen, device=device) * std).to(torch.bfloat16)

    return {
        "size": size,
        "device": str(device),
        "w_h": randn(d, d, std=1.0 / math.sqrt(d)),
        "w_out": randn(d, v, std=1.0 / math.sqrt(d)),
        "emb": randn(v, d),
        "h0": randn(b, d),
        "first": torch.randint(0, v, (b,), generator=host_gen).to(device),
        "allowed": torch.randperm(v, generator=host_gen)[:k].sort().values,   # on the host, like the grammar
    }


def decode_step(h, token, w_h, w_out, emb):
    """One step of the model: the new hidden state and the fp32 logits over the whole vocabulary."""
    import torch

    h = torch.tanh(h @ w_h + emb[token])
    return h, (h @ w_out).float()


def setup(device: str, seed: int) -> dict:
    import torch

    state = _build(device, seed)
    size = state["size"]
    pinned = str(device).startswith("cuda")
    # the host sampler's buffers, pinned once so the copies run at full PCIe speed
    state["host_logits"] = torch.empty(size["batch"], size["vocab"], pin_memory=pinned)
    state["host_ids"] = torch.empty(size["batch"], dtype=torch.long, pin_memory=pinned)
    state["tokens"] = torch.empty(size["batch"], size["tokens"], dtype=torch.long, pin_memory=pinned)
    return state


def step(state: dict):
    import torch

    w_h, w_out, emb, allowed = state["w_h"], state["w_out"], state["emb"], state["allowed"]
    host_logits, host_ids, tokens = state["host_logits"], state["host_ids"], state["tokens"]
    h, token = state["h0"], state["first"]
    with torch.no_grad():
        for t in range(state["size"]["tokens"]):
            h, logits = decode_step(h, token, w_h, w_out, emb)
            host_logits.copy_(logits)                                     # all V logits -> host, waits
            host_ids.copy_(allowed[host_logits[:, allowed].argmax(dim=1)])  # the host sampler
            tokens[:, t] = host_ids
            token = host_ids.to(state["device"], non_blocking=True)
    return tokens


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("h0", "first")  # `allowed` is the grammar (sorted distinct ids), not data
