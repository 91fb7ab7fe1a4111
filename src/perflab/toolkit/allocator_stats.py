"""The CUDA caching allocator's numbers at a process's exit: what `perflab profile` and `perflab memory record`
report so an investigation can tell whether memory deserves a closer look."""

from __future__ import annotations

from typing import Any

MB = 1024.0 * 1024.0


def memory_stats(torch: Any) -> dict[str, Any] | None:
    """The CUDA allocator's numbers for this process's device: capacity, peaks, out-of-memory errors, retries,
    private pools (one per CUDA graph capture); None when CUDA was never initialized."""
    try:
        if torch is None or not torch.cuda.is_initialized():
            return None
        dev = torch.cuda.current_device()
        s = torch.cuda.memory_stats(dev)
        props = torch.cuda.get_device_properties(dev)
        segments = torch.cuda.memory_snapshot()
        segments = segments.get("segments", []) if isinstance(segments, dict) else segments
        pools = {tuple(seg.get("segment_pool_id") or (0, 0)) for seg in segments if seg.get("device", dev) == dev}
        pools.discard((0, 0))
        return {"device": props.name, "total_mb": round(props.total_memory / MB, 1),
                "peak_reserved_mb": round(s.get("reserved_bytes.all.peak", 0) / MB, 1),
                "peak_allocated_mb": round(s.get("allocated_bytes.all.peak", 0) / MB, 1),
                "reserved_mb": round(s.get("reserved_bytes.all.current", 0) / MB, 1),
                "num_ooms": int(s.get("num_ooms", 0)), "num_alloc_retries": int(s.get("num_alloc_retries", 0)),
                "private_pools": len(pools)}
    except Exception as exc:  # runs at the user's exit: report, never raise
        return {"error": f"{type(exc).__name__}: {exc}"}
