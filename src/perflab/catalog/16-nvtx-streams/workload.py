"""nvtx-streams: the slow workload.

An image classifier's serving step in three annotated stages (``torch.profiler.record_function``,
which is what an NVTX push/pop range is to Nsight Systems):

- ``preprocess``: 128 frames of 3 x 512 x 512 uint8, already on the GPU, normalized the textbook way
  in fp32 (to float, / 255, - 0.5, / 0.5), cast to bf16 and cut into 16 x 16 patches;
- ``model``: a patch embedding (768 -> 512, bf16) with GELU, mean over the 1024 patches, a linear
  head to 1000 classes;
- ``postprocess``: softmax, the top 5 classes, brought to the host (``.cpu()``) and turned into labels.

``step`` returns the logits [128, 1000] fp32 (the labels are kept in ``state["labels_out"]``).

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> tensor``.
"""
from __future__ import annotations

import math

from perflab.workloads import sizes

SIZE = {"batch": 128, "size": 512, "patch": 16, "dim": 512, "classes": 1000, "top": 5}
SMOKE_SIZE = {"batch": 2, "size": 32, "patch": 8, "dim": 16, "classes": 10, "top": 3}


def _build(device: str, seed: int) -> dict:
    """Frames (uint8, on the device), the embedding and head weights (bf16), the class names."""
    import torch

    size = sizes.pick(device, SIZE, SMOKE_SIZE)
    gen = torch.Generator(device=device).manual_seed(int(seed))
    b, s, p, d, c = size["batch"], size["size"], size["patch"], size["dim"], size["classes"]
    k = 3 * p * p
    images = torch.randint(0, 256, (b, 3, s, s), generator=gen, device=device, dtype=torch.uint8)
    w_embed = (torch.randn(k, d, generator=gen, device=device) / math.sqrt(k)).to(torch.bfloat16)
    w_head = (torch.randn(d, c, generator=gen, device=device) * 4.0 / math.sqrt(d)).to(torch.bfloat16)
    return {"size": size, "device": str(device), "images": images, "w_embed": w_embed, "w_head": w_head,
            "names": [f"class-{i}" for i in range(c)]}


def patchify(x, p: int):
    """[B, 3, H, W] -> [B, (H/p)(W/p), 3 p p]: one row per patch."""
    b, c, h, w = x.shape
    return x.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5).reshape(b, (h // p) * (w // p), c * p * p)


def model(state: dict, patches):
    import torch.nn.functional as F

    e = F.gelu(patches @ state["w_embed"])
    return (e.mean(dim=1) @ state["w_head"]).float()


def postprocess(state: dict, logits) -> list:
    top = logits.softmax(dim=-1).topk(state["size"]["top"], dim=-1)
    ids = top.indices.cpu().tolist()                              # the host needs the ids
    return [[state["names"][i] for i in row] for row in ids]


def preprocess(state: dict):
    import torch

    x = state["images"].float()
    x = x / 255.0
    x = x - 0.5
    x = x / 0.5
    return patchify(x.to(torch.bfloat16), state["size"]["patch"])


def setup(device: str, seed: int) -> dict:
    return _build(device, seed)


def step(state: dict):
    import torch
    from torch.profiler import record_function

    with torch.no_grad():
        with record_function("preprocess"):
            patches = preprocess(state)
        with record_function("model"):
            logits = model(state, patches)
        with record_function("postprocess"):
            state["labels_out"] = postprocess(state, logits)
    return logits


# The step's inputs, refilled before every timed repetition of a fix check (puzzles/engine/guard.py).
INPUTS = ("images",)
