"""host-sync: the slow workload.

Greedy decoding with a tiny recurrent language model: token embedding -> 2 GRU layers -> LM head
over a 32,000-token vocabulary; hidden 256, fp16, batch 1; 64 new tokens per step, stopping early
at EOS. The per-token forward pass is captured once into a CUDA graph (one replay per token); the
decode loop around it is ordinary Python: it collects the ids in a list, checks for EOS, and feeds
each new id back into the graph's input buffer.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> tensor``.
``step`` returns the ``new_tokens`` generated ids as an int64 tensor on the device; positions after
the first EOS are ``PAD`` (-1). ``state["eos"]`` is the end-of-sequence id (read at each step on
the CPU path; tests change it to exercise early stopping).
"""
from __future__ import annotations

import math

from perflab.workloads import cuda_graph, sizes

SIZE = {"vocab": 32000, "dim": 256, "layers": 2, "new_tokens": 64}
SMOKE_SIZE = {"vocab": 512, "dim": 32, "layers": 2, "new_tokens": 16}
EOS = 2
PAD = -1


def _build(device: str, seed: int) -> dict:
    """Weights, prompt token and initial hidden state, deterministic from ``seed``."""
    import torch

    size = sizes.pick(device, SIZE, SMOKE_SIZE)
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


def _token_step(state: dict) -> None:
    """Static-buffer version of one token: reads static_tok / static_h, writes static_h / static_next."""
    logits, new_hs = forward_token(state["params"], state["static_tok"], state["static_h"])
    for buf, h in zip(state["static_h"], new_hs):
        buf.copy_(h)
    state["static_next"].copy_(logits.argmax(dim=-1))


def setup(device: str, seed: int) -> dict:
    import torch

    state = _build(device, seed)
    state.update(device=str(device), eos=EOS)
    state["static_tok"] = state["prompt"].clone()
    state["static_h"] = [h.clone() for h in state["h0"]]
    state["static_next"] = torch.zeros(1, dtype=torch.long, device=device)
    if str(device).startswith("cuda"):
        # One token = one CUDA graph replay (the launch-overhead lesson, already applied).
        state["graph"], _ = cuda_graph.capture(lambda: _token_step(state), warmups=3)
        torch.cuda.synchronize()
    return state


def step(state: dict):
    import torch

    n_new, eos, device = state["size"]["new_tokens"], state["eos"], state["device"]
    with torch.no_grad():
        # start from the prompt: last prompt token and the hidden state it left behind
        state["static_tok"].copy_(state["prompt"])
        for buf, h in zip(state["static_h"], state["h0"]):
            buf.copy_(h)

        tokens = []
        for _ in range(n_new):
            if "graph" in state:
                state["graph"].replay()
            else:
                _token_step(state)
            next_id = state["static_next"].item()          # the id, as a Python int
            tokens.append(next_id)
            if next_id == eos:
                break
            state["static_tok"].copy_(torch.tensor([next_id], device=device))   # feed it back in
        tokens += [PAD] * (n_new - len(tokens))
        return torch.tensor(tokens, dtype=torch.long, device=device)


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("prompt", "h0")


def refill(state: dict, seed: int) -> None:
    """A new last prompt token (over the vocabulary, past the special ids) and hidden state."""
    from perflab.workloads import fresh

    fresh.randint_(state["prompt"], seed, 3, state["size"]["vocab"])
    for i, h in enumerate(state["h0"]):
        fresh.randn_(h, seed * 31 + i + 1, std=0.5)
