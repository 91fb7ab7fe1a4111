"""Which tensor-core paths the GPU in a trace has, by its compute capability (the trace's device properties): TF32
and bf16 tensor cores came with Ampere (8.0); Volta (7.0) and Turing (7.5) have fp16 ones only; before Volta there
are none. Where the trace does not say (no device properties, an AMD GPU), all three are assumed."""
from __future__ import annotations

from perflab.trace.model import Trace

ALL_PATHS = ("tf32", "bf16", "fp16")


def compute_capability(trace: Trace) -> tuple[int, int] | None:
    """(major, minor) of the trace's NVIDIA GPU (the one its GPU work ran on, by name); None when unknown."""
    props = [p for p in trace.meta.get("device_properties") or [] if isinstance(p, dict)]
    name = str(trace.meta.get("device_name") or "")
    chosen = next((p for p in props if str(p.get("name", "")) == name), props[0] if props else None)
    if chosen is None or "gcnArchName" in chosen or any(w in str(chosen.get("name", "")) for w in ("AMD", "Radeon")):
        return None
    major, minor = chosen.get("computeMajor"), chosen.get("computeMinor", 0)
    if not isinstance(major, int) or isinstance(major, bool) or major <= 0:
        return None
    return major, minor if isinstance(minor, int) and not isinstance(minor, bool) else 0


def tensor_paths(trace: Trace) -> tuple[str, ...]:
    """The tensor-core paths the GPU has, best first (all three where unknown)."""
    cc = compute_capability(trace)
    if cc is None or cc >= (8, 0):
        return ALL_PATHS
    return ("fp16",) if cc >= (7, 0) else ()
