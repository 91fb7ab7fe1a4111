"""d2h-copy: the reference solution.

Same model, same weights, same tokens as workload.py. The sampler moves to the GPU: the logits of the
K allowed ids are gathered and their argmax taken on the device, the chosen ids are written into a
device tensor [B, T] and fed straight into the next decode step. Nothing crosses PCIe inside the
loop; the host never waits for the GPU. (The logits are not converted to fp32 either: the argmax of
bf16 values is the argmax of their exact fp32 copies.)

The ids come back as a device tensor; a caller that needs them on the host copies [B, T] int64 once
(16 KiB) after the loop, not 16 MiB per token.
"""
from __future__ import annotations

import math
import os

SIZE = {"batch": 64, "dim": 1024, "vocab": 65536, "allowed": 16, "tokens": 32}
SMOKE_SIZE = {"batch": 4, "dim": 32, "vocab": 256, "allowed": 8, "tokens": 5}


def _size(device: str) -> dict:
    if str(device).startswith("cpu") or os.environ.get("PERFLAB_SMOKE", "0") != "0":
        return dict(SMOKE_SIZE)
    return dict(SIZE)


def _build(device: str, seed: int) -> dict:
    """Weights, embeddings, the allowed ids and the first token of each sequence, from ``seed``."""
    import torch

    size = _size(device)
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
    state["allowed_dev"] = state["allowed"].to(device)        # the grammar, on the device once
    state["tokens"] = torch.empty(size["batch"], size["tokens"], dtype=torch.long, device=device)
    return state


def step(state: dict):
    import torch

    w_h, w_out, emb, allowed = state["w_h"], state["w_out"], state["emb"], state["allowed_dev"]
    tokens = state["tokens"]
    h, token = state["h0"], state["first"]
    with torch.no_grad():
        for t in range(state["size"]["tokens"]):
            h = torch.tanh(h @ w_h + emb[token])
            logits = h @ w_out                                   # [B, V] bf16, stays on the GPU
            token = allowed[logits[:, allowed].argmax(dim=1)]    # the sampler, on the device
            tokens[:, t] = token
    return tokens
