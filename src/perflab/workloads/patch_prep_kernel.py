"""One-pass image preprocessing for the nvtx-streams puzzle's solution (needs triton; imported on GPU use).

`patch_prep(images, patch)`: uint8 frames [B, 3, H, W] -> bf16 patches [B, (H/p)(W/p), 3 p p], each
pixel scaled to [-1, 1] the way the slow chain does it (x * fp32(1/255), + (-0.5), * 2.0, rounded to
bf16), in one kernel: one read of each byte, one bf16 write, no fp32 intermediates in memory.
"""
from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

RECIPROCAL_255 = 0.003921568859368563        # float32(1) / float32(255), what torch multiplies by for `/ 255.0`


@triton.jit
def patch_prep_kernel(img_ptr, out_ptr, H, W, NPW, NP, P: tl.constexpr, KP: tl.constexpr):
    """Program `row` = b * NP + n writes patch n of frame b: its 3 x P x P pixels, channel-major."""
    row = tl.program_id(0)
    b = row // NP
    n = row % NP
    hy = n // NPW
    wx = n % NPW
    k = tl.arange(0, KP)
    mask = k < 3 * P * P
    c = k // (P * P)
    r = k % (P * P)
    src = img_ptr + ((b * 3 + c) * H + hy * P + r // P) * W + wx * P + r % P
    x = tl.load(src, mask=mask, other=0).to(tl.float32)
    x = x * 0.003921568859368563
    x = x + (-0.5)
    x = x * 2.0
    tl.store(out_ptr + row * (3 * P * P) + k, x.to(tl.bfloat16), mask=mask)


def patch_prep(images: Any, patch: int) -> Any:
    import torch

    b, c, h, w = images.shape
    assert c == 3 and h % patch == 0 and w % patch == 0 and images.is_contiguous()
    npw, np_ = w // patch, (h // patch) * (w // patch)
    out = torch.empty(b, np_, 3 * patch * patch, device=images.device, dtype=torch.bfloat16)
    patch_prep_kernel[(b * np_,)](images, out, h, w, npw, np_, P=patch, KP=triton.next_power_of_2(3 * patch * patch))
    return out
