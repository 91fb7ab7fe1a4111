"""The size a workload runs at: its SIZE on a GPU; its SMOKE_SIZE on the CPU or with PERFLAB_SMOKE=1, so CI
runs every workload in well under a second."""
from __future__ import annotations

import os


def smoke(device: str) -> bool:
    return str(device).startswith("cpu") or os.environ.get("PERFLAB_SMOKE", "0") != "0"


def pick(device: str, size: dict, smoke_size: dict) -> dict:
    """A copy of the size that fits the device."""
    return dict(smoke_size if smoke(device) else size)
