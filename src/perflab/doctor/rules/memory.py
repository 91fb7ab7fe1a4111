"""`memory-capacity` rules over a memory snapshot: CUDA graph private pools, reserved ≫ allocated,
duplicated buffers. Gains are shares of the reserved memory a fix would give back.

Each rule is `rule(ctx) -> list[Finding]` with ctx a `MemoryContext` (perflab.doctor.memory).
"""
from __future__ import annotations

from perflab.doctor.finding import Finding
from perflab.doctor.registry import rule
from perflab.doctor.registry import significant as _finding

# Below these absolute sizes a pattern is not worth a finding, whatever its share.
MIN_POOL_SAVING_MB = 64.0
MIN_FREE_MB = 256.0
MIN_RESERVED_OVER_ALLOCATED = 1.5
MIN_DUPLICATE_MB = 64.0


@rule(source="memory")
def graph_private_pools(ctx) -> list[Finding]:
    pp = ctx.device["private_pools"]
    if pp["count"] < 2 or pp["shared_pool_saving_mb"] < MIN_POOL_SAVING_MB:
        return []
    reserved = ctx.totals["reserved_mb"]
    gain = 100.0 * pp["shared_pool_saving_mb"] / reserved if reserved else 0.0
    return _finding(
        "memory-capacity", gain,
        f"{pp['count']} private memory pools (one per CUDA graph capture) reserve {pp['reserved_mb']:.0f} MB "
        f"({100.0 * pp['reserved_mb'] / reserved:.0f}% of the {reserved:.0f} MB reserved), "
        f"{pp['mean_mb']:.0f} MB each; one shared pool would keep ~{pp['max_mb']:.0f} MB.",
        {"private_pools": pp["count"], "private_reserved_mb": pp["reserved_mb"], "mean_pool_mb": pp["mean_mb"],
         "largest_pool_mb": pp["max_mb"], "private_allocated_mb": pp["allocated_mb"],
         "reserved_mb": reserved, "allocated_mb": ctx.totals["allocated_mb"],
         "shared_pool_saving_mb": pp["shared_pool_saving_mb"]},
        "Capture all graphs into one pool (torch.cuda.graph(g, pool=torch.cuda.graph_pool_handle()) shared by "
        "every capture, or pool=first_graph.pool()), capture largest batch size first, and capture a few "
        "padded sizes (1, 2, 4, 8, ...) instead of every size; torch.compile: mark dynamic shapes.",
    )


@rule(source="memory")
def reserved_over_allocated(ctx) -> list[Finding]:
    """Cached free memory of the default pool (private pools are the rule above's)."""
    default = next((p for p in ctx.device["pools"] if not p["private"]), None)
    if default is None:
        return []
    reserved, allocated, free = default["reserved_mb"], default["allocated_mb"], default["free_mb"]
    ratio = reserved / allocated if allocated else float("inf")
    if free < MIN_FREE_MB or ratio < MIN_RESERVED_OVER_ALLOCATED:
        return []
    t = ctx.totals
    gain = 100.0 * free / t["reserved_mb"] if t["reserved_mb"] else 0.0
    peak = ctx.timeline
    return _finding(
        "memory-capacity", gain,
        f"Reserved {reserved:.0f} MB but only {allocated:.0f} MB allocated ({ratio:.1f}x): {free:.0f} MB sit "
        "cached in the allocator"
        + (f", left over from a peak of {peak['peak_allocated_mb']:.0f} MB allocated" if peak["events"] else "")
        + ".",
        {"reserved_mb": reserved, "allocated_mb": allocated, "free_mb": free,
         "reserved_over_allocated": round(ratio, 3) if allocated else None, "fragmentation": t["fragmentation"],
         "largest_free_mb": t["largest_free_mb"], "peak_allocated_mb": peak["peak_allocated_mb"],
         "peak_reserved_mb": peak["peak_reserved_mb"], "peak_site": peak["peak_site"] or ""},
        "Find what made the peak (the timeline's peak and the top allocation sites): avoid materializing "
        "large temporaries (e.g. a dequantized copy of every weight), free them sooner, or share pools; "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True reduces fragmentation.",
    )


@rule(source="memory")
def duplicated_buffers(ctx) -> list[Finding]:
    dups = [d for d in ctx.device["duplicated"] if d["redundant_mb"] >= MIN_DUPLICATE_MB]
    if not dups:
        return []
    redundant = sum(d["redundant_mb"] for d in dups)
    reserved = ctx.totals["reserved_mb"]
    top = dups[0]
    gain = 100.0 * redundant / reserved if reserved else 0.0
    return _finding(
        "memory-capacity", gain,
        f"{top['copies']} live copies of a {top['block_mb']:.1f} MB buffer allocated at {top['site']} "
        f"(in {top['pools']} pools); duplicated buffers hold {redundant:.0f} MB.",
        {"duplicated_mb": round(redundant, 3), "top_site": top["site"], "copies": top["copies"],
         "block_mb": top["block_mb"], "groups": len(dups)},
        "Allocate the buffer once and reuse it (static inputs shared by all graphs, slices of one max-size "
        "buffer), or free the copies.",
    )
