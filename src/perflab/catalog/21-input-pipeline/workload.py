"""input-pipeline: the slow workload.

A small CNN classifier (two 3 x 3 convolutions, 384 channels on the GPU, 16 on the CPU, and a linear
head) fed by a torch DataLoader. The dataset holds raw uint8 images (3 x 32 x 32,
in RAM); every sample goes through a per-sample numpy transform in ``__getitem__``, channel by channel (scale to [0, 1],
per-channel normalize, a 3 x 3 box blur, a contrast curve), in the main process (num_workers=0),
before the batch reaches the model. One step = one batch: fetch it, move it to the device, classify.

Interface (docs/CONTRACTS.md): ``setup(device, seed) -> state`` and ``step(state) -> tensor``;
``step`` returns the logits [batch, classes] (float32, on the device) of the next batch (batches in
dataset order, starting again at the end of the dataset).
"""
from __future__ import annotations

import os

SIZE = {"images": 2048, "batch": 256, "side": 32, "classes": 10, "width": 384}
CPU_WIDTH = 16          # on device "cpu" the same network, narrower (a CPU runs the wide one for seconds)
SMOKE_SIZE = {"images": 256, "batch": 64, "side": 32, "classes": 10, "width": 8}
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def _size(device: str) -> dict:
    if os.environ.get("PERFLAB_SMOKE", "0") != "0":
        return dict(SMOKE_SIZE)
    return dict(SIZE, width=CPU_WIDTH) if str(device).startswith("cpu") else dict(SIZE)


def transform_sample(img):
    """One raw image (uint8 [3, H, W], numpy) -> normalized, blurred, contrast-curved float32 [3, H, W].

    Channel by channel, as image libraries do: scale to [0, 1], normalize with the channel's mean and
    std, 3 x 3 box blur (edges replicated), then a tanh contrast curve.
    """
    import numpy as np

    out = np.empty(img.shape, dtype=np.float32)
    h, w = img.shape[1:]
    for c in range(img.shape[0]):
        x = img[c].astype(np.float32) / np.float32(255.0)
        x = (x - np.float32(MEAN[c])) / np.float32(STD[c])
        p = np.pad(x, 1, mode="edge")
        blur = np.zeros_like(x)
        for dy in range(3):
            for dx in range(3):
                blur += p[dy:dy + h, dx:dx + w]
        blur /= np.float32(9.0)
        out[c] = np.tanh(blur) * np.float32(1.5)
    return out


class RawImages:
    """A map-style dataset of raw images with an optional per-sample transform."""

    def __init__(self, images, labels, transform=None):
        self.images, self.labels, self.transform = images, labels, transform

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int):
        import torch

        img = self.images[i]
        if self.transform is not None:
            img = self.transform(img)
        return torch.from_numpy(img), int(self.labels[i])


def build(device: str, seed: int) -> dict:
    """Raw images, labels and the model's weights, deterministic from ``seed``."""
    import numpy as np
    import torch

    size = _size(device)
    rng = np.random.default_rng(int(seed))
    s = size["side"]
    images = rng.integers(0, 256, size=(size["images"], 3, s, s), dtype=np.uint8)
    labels = rng.integers(0, size["classes"], size=size["images"])
    gen = torch.Generator().manual_seed(int(seed))
    c = size["width"]
    params = {
        "conv_w": (torch.randn(c, 3, 3, 3, generator=gen) * (27 ** -0.5)).to(device),
        "conv_b": torch.zeros(c).to(device),
        "conv2_w": (torch.randn(c, c, 3, 3, generator=gen) * ((9 * c) ** -0.5)).to(device),
        "conv2_b": torch.zeros(c).to(device),
        "fc_w": (torch.randn(size["classes"], c, generator=gen) * c ** -0.5).to(device),
        "fc_b": torch.zeros(size["classes"]).to(device),
    }
    return {"size": size, "images": images, "labels": labels, "params": params, "device": str(device)}


def classify(params: dict, x):
    """The model: images [B, 3, H, W] float32 -> logits [B, classes]: conv 3x3 stride 2, ReLU, conv 3x3, ReLU,
    global mean, linear."""
    import torch.nn.functional as F

    h = F.relu(F.conv2d(x, params["conv_w"], params["conv_b"], stride=2, padding=1))
    h = F.relu(F.conv2d(h, params["conv2_w"], params["conv2_b"], padding=1))
    return F.linear(h.mean(dim=(2, 3)), params["fc_w"], params["fc_b"])


def next_batch(state: dict):
    """The next batch of the loader, starting a new pass over the dataset when one ends."""
    try:
        return next(state["it"])
    except (KeyError, StopIteration):
        state["it"] = iter(state["loader"])
        return next(state["it"])


def setup(device: str, seed: int) -> dict:
    from torch.utils.data import DataLoader

    state = build(device, seed)
    data = RawImages(state["images"], state["labels"], transform=transform_sample)
    state["loader"] = DataLoader(data, batch_size=state["size"]["batch"], shuffle=False, num_workers=0)
    return state


def step(state: dict):
    import torch

    x, _labels = next_batch(state)
    with torch.no_grad():
        return classify(state["params"], x.to(state["device"]))


# No input the fix checker can refill (puzzles/engine/guard.py): the dataset (numpy images) feeds a DataLoader; a
# fix may legitimately re-layout it once (pin it, batch it as a tensor), where a refill of state["images"] cannot
# reach.
INPUTS = ()
