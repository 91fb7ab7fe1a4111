"""When a program's memory deserves its allocator's history: the numbers the CUDA caching allocator reports at the
process's exit (toolkit/allocator_stats.py), and its output. Light on purpose: the profiled process itself asks it
at exit whether to keep the history it recorded (toolkit/memory_history.py)."""
from __future__ import annotations

from typing import Any

# The CUDA allocator is under pressure when what it reserved at its peak nears the device's memory: the next
# allocation that fits no cached block must free cached blocks (a retry) or fail.
NEAR_CAPACITY = 0.85
MIN_PRIVATE_POOLS = 2      # two graph captures with their own pools already hold memory neither can reuse
OOM_TEXT = ("OutOfMemoryError", "CUDA out of memory")


def memory_reasons(stats: dict[str, Any] | None, output: str = "") -> list[str]:
    """Why the memory level is worth a snapshot, one sentence per reason; [] when nothing says so."""
    reasons = []
    stats = stats if isinstance(stats, dict) else {}
    ooms = stats.get("num_ooms") or 0
    if ooms or any(t in output for t in OOM_TEXT):
        reasons.append(f"the program ran out of GPU memory ({ooms} out-of-memory error(s) counted by the allocator)"
                       if ooms else "the program's output reports a CUDA out-of-memory error")
    total, peak = stats.get("total_mb"), stats.get("peak_reserved_mb")
    if isinstance(total, (int, float)) and isinstance(peak, (int, float)) and total > 0 and peak >= NEAR_CAPACITY * total:
        reasons.append(f"the allocator's reserved memory peaked at {peak / 1024:,.1f} GiB of the device's "
                       f"{total / 1024:,.1f} GiB ({100 * peak / total:.0f} %, at or above {100 * NEAR_CAPACITY:.0f} %)")
    retries = stats.get("num_alloc_retries") or 0
    if retries:
        reasons.append(f"the allocator had to free its cache and retry cudaMalloc {retries} time(s): memory pressure")
    pools = stats.get("private_pools") or 0
    if pools >= MIN_PRIVATE_POOLS:
        reasons.append(f"{pools} private memory pools (one per CUDA graph capture) were alive at exit")
    return reasons
