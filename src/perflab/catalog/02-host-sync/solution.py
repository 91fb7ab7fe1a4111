"""host-sync: the reference solution.

Same model, weights, prompt and outputs as workload.py. The token never leaves the GPU:

* argmax writes each new id straight into a preallocated int64 tensor on the device, and the next
  token's embedding reads it from there (no ``.item()``, no CPU tensor copied back);
* EOS is handled on the device after the loop: every position after the first EOS becomes PAD;
* with nothing left that needs the host in the middle, the whole 64-token loop is captured once
  into a single CUDA graph; a step is one replay and no synchronization at all.

On the CPU the same device-side loop runs eagerly (no graphs there).
"""
from __future__ import annotations

import math
import os

SIZE = {"vocab": 32000, "dim": 256, "layers": 2, "new_tokens": 64}
SMOKE_SIZE = {"vocab": 512, "dim": 32, "layers": 2, "new_tokens": 16}
EOS = 2
PAD = -1


def _size(device: str) -> dict:
    if str(device).startswith("cpu") or os.environ.get("PERFLAB_SMOKE", "0") != "0":
        return dict(SMOKE_SIZE)
    return dict(SIZE)


def _build(device: str, seed: int) -> dict:
    """Weights, prompt token and initial hidden state, deterministic from ``seed``."""
    import torch

    size = _size(device)
    gen = torch.Generator().manual_seed(int(seed))
    d, v, n_layers = size["dim"], size["vocab"], size["layers"]

    def randn(*shape, std=1.0):
        return (torch.randn(*shape, generator=gen) * std).to(device=device, dtype=torch.float16)

    params = {
        "emb": randn(v, d),
        "layers": [
            {
                "w_ih": randn(3 * d, d, std=1.0 / math.sqrt(d)),
                "w_hh": randn(3 * d, d, std=1.0 / math.sqrt(d)),
                "b_ih": randn(3 * d, std=0.1),
                "b_hh": randn(3 * d, std=0.1),
            }
            for _ in range(n_layers)
        ],
        "head": randn(v, d, std=1.0 / math.sqrt(d)),
    }
    prompt = torch.randint(3, v, (1,), generator=gen).to(device)          # last prompt token
    h0 = [randn(1, d, std=0.5) for _ in range(n_layers)]                   # hidden state after the prompt
    return {"size": size, "params": params, "prompt": prompt, "h0": h0}


def forward_token(params: dict, tok, hs: list):
    """One decoding step of the model: token id [1] (int64) and hidden states -> logits [1, V], new states."""
    import torch
    import torch.nn.functional as F

    x = F.embedding(tok, params["emb"])                                    # [1, d]
    new_hs = []
    for layer, h in zip(params["layers"], hs):
        x = torch.gru_cell(x, h, layer["w_ih"], layer["w_hh"], layer["b_ih"], layer["b_hh"])
        new_hs.append(x)
    return F.linear(x, params["head"]), new_hs                             # [1, V]


def decode(state: dict):
    """The whole greedy loop with no host round trip: returns new_tokens ids, PAD after the first EOS."""
    import torch

    n_new, eos = state["size"]["new_tokens"], state["eos"]
    raw = state["raw"]                                       # [n_new] int64, on the device
    tok, hs = state["prompt"], state["h0"]
    for i in range(n_new):
        logits, hs = forward_token(state["params"], tok, hs)
        tok = raw[i : i + 1]
        torch.argmax(logits, dim=-1, out=tok)                # written on the device, read by the next token
    is_eos = raw == eos
    seen_before = (torch.cumsum(is_eos, 0) - is_eos.long()) > 0   # an EOS strictly before position i
    return raw.masked_fill(seen_before, PAD)


def setup(device: str, seed: int) -> dict:
    import torch

    state = _build(device, seed)
    state.update(device=str(device), eos=EOS)
    state["raw"] = torch.empty(state["size"]["new_tokens"], dtype=torch.long, device=device)
    if str(device).startswith("cuda"):
        with torch.no_grad():
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    decode(state)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                state["static_out"] = decode(state)
        torch.cuda.synchronize()
        state["graph"] = graph
    return state


def step(state: dict):
    import torch

    if "graph" not in state:
        with torch.no_grad():
            return decode(state)
    state["graph"].replay()                                  # 64 tokens, one launch, no sync
    return state["static_out"].clone()
