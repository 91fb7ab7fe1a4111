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

from perflab.workloads import siblings

_w = siblings.load(__file__, "10-d2h-copy")   # this puzzle's workload.py: what the fix keeps
SIZE, SMOKE_SIZE, _build, decode_step = _w.SIZE, _w.SMOKE_SIZE, _w._build, _w.decode_step


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
