"""Rules over a memory snapshot. `memory-capacity`: CUDA graph private pools, reserved ≫ allocated, duplicated
buffers, temporaries held together, out of memory; their gains are shares of the reserved memory a fix would give
back, their ceilings (`speedup_at_most`, a ratio of reserved memory as the gain) the reserved memory over the least
the live tensors need. No floor: what the allocator reserves after the fix also depends on its block rounding and
on fragmentation, which a snapshot of the slow program cannot show. `allocator-churn`: device memory given back to the driver and taken again inside the recorded history; its
gain is the share of the recorded window the driver calls take (analysis/gpu_memory/segment_churn.py).

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
MIN_HELD_MB = 256.0
MIN_HELD_ALLOCS = 8
MIN_CYCLED_SEGMENTS = 8   # segments given back and taken again: fewer is a one-off (a graph capture's empty_cache)


def _at_most(reserved_mb: float, live_mb: float) -> dict:
    """The ceiling on the reserved memory's ratio, slow / fix: the fix still reserves what the live tensors need
    (allocated at the snapshot; the default pool's peak; what stays allocated after temporaries held together go,
    alive beside the last of them)."""
    return {"speedup_at_most": round(reserved_mb / live_mb, 2)} if live_mb > 0 and reserved_mb > live_mb else {}


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
         "shared_pool_saving_mb": pp["shared_pool_saving_mb"], **_at_most(reserved, ctx.totals["allocated_mb"])},
        "Capture all graphs into one pool (torch.cuda.graph(g, pool=torch.cuda.graph_pool_handle()) shared by "
        "every capture, or pool=first_graph.pool()), capture largest batch size first, and capture a few "
        "padded sizes (1, 2, 4, 8, ...) instead of every size; torch.compile: mark dynamic shapes.",
    )


@rule(source="memory")
def reserved_over_allocated(ctx) -> list[Finding]:
    """Cached free memory of the default pool beyond what its peak allocation needed (private pools are the rule
    above's). The baseline is that peak over the recorded history, else what is allocated at the snapshot."""
    base = ctx.device["baseline"]
    reserved, peak = base["reserved_mb"], base["baseline_mb"]
    excess = reserved - peak
    ratio = reserved / peak if peak else float("inf")
    if excess < MIN_FREE_MB or ratio < MIN_RESERVED_OVER_ALLOCATED or base["predates_history"]:
        return []
    t = ctx.totals
    gain = 100.0 * excess / t["reserved_mb"] if t["reserved_mb"] else 0.0
    against = "its peak" if base["basis"] == "history" else "what is allocated at the snapshot"
    return _finding(
        "memory-capacity", gain,
        f"The default pool reserves {reserved:,.0f} MB, {ratio:.1f}x {against} ({peak:,.0f} MB): {excess:,.0f} MB sit "
        f"cached beyond it. Baseline: {base['text']}.",
        {"reserved_mb": reserved, "baseline_mb": peak, "baseline": base["basis"], "excess_mb": round(excess, 3),
         "free_mb": round(reserved - base["allocated_mb"], 3),
         "reserved_over_baseline": round(ratio, 3) if peak else None, "allocated_mb": base["allocated_mb"],
         "resident_before_history_mb": base["start_allocated_mb"], "fragmentation": t["fragmentation"],
         "largest_free_mb": t["largest_free_mb"], "peak_reserved_mb": ctx.timeline["peak_reserved_mb"],
         "peak_site": ctx.timeline["peak_site"] or "", **_at_most(t["reserved_mb"], peak)},
        "Find what reserved more than the peak needs: blocks of many sizes that fit no cached block (fragmentation: "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True), a peak before the recorded history, allocations on "
        "several streams; avoid materializing large temporaries (a dequantized copy of every weight) and free "
        "them sooner.",
    )


@rule(source="memory")
def held_until_released_together(ctx) -> list[Finding]:
    """Temporaries that stay alive until one moment and are freed together: one owner holds them past their use."""
    held = ctx.device.get("held_together")
    if not held or held["mb"] < MIN_HELD_MB or held["allocated_at_events"] < MIN_HELD_ALLOCS:
        return []
    resident = held["resident_after_mb"]
    if held["mb"] < resident:  # gradients freed by zero_grad, a batch dropped: no more than what stays resident
        return []
    reserved = ctx.timeline["peak_reserved_mb"] or ctx.totals["reserved_mb"]
    saving = held["mb"] - held["largest_block_mb"]  # one layer's temporaries at a time would remain
    gain = 100.0 * saving / reserved if reserved else 0.0
    where = ", ".join(f"{s['site']} ({s['mb']:,.0f} MB)" for s in held["sites"][:2])
    return _finding(
        "memory-capacity", gain,
        f"{held['mb']:,.0f} MB in {held['blocks']} blocks, allocated one after another ({held['allocated_at_events']} "
        f"allocations; mostly at {where}), stay alive until one moment and are freed together, "
        f"{held['mb'] / max(resident, 1e-9):.1f}x what stays allocated ({resident:,.0f} MB): one owner keeps them past "
        "their last use.",
        {"held_mb": held["mb"], "blocks": held["blocks"], "allocations": held["allocated_at_events"],
         "resident_after_mb": resident, "largest_block_mb": held["largest_block_mb"],
         "peak_reserved_mb": reserved, "sites": [s["site"] for s in held["sites"]], **_at_most(reserved, resident)},
        "Free each temporary after its last use: run inference under torch.inference_mode() or torch.no_grad() (no "
        "autograd graph keeps activations alive), drop references to intermediate results (no lists of them), "
        "or process in chunks; the peak then holds one layer's temporaries, not all of them.",
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


@rule(source="memory")
def out_of_memory(ctx) -> list[Finding]:
    """The allocator recorded an out-of-memory error on this device: an allocation failed with too little free
    on the device. Whatever else the snapshot shows, the program did not run: the whole run is the gain."""
    ooms = [e for e in ctx.events if e.action == "oom"]
    if not ooms:
        return []
    last = ooms[-1]
    t = ctx.totals
    free = f", {last.device_free / 2**20:,.0f} MB free on the device" if last.device_free is not None else ""
    sites = ctx.device["top_sites"][:2]
    held = "; most of it allocated at " + ", ".join(f"{s['site']} ({s['mb']:,.0f} MB)" for s in sites) if sites else ""
    return _finding(
        "memory-capacity", 100.0,
        f"Out of memory: {len(ooms)} allocation(s) failed, the last asking for {last.size / 2**20:,.0f} MB{free}, "
        f"with {t['reserved_mb']:,.0f} MB reserved by PyTorch ({t['allocated_mb']:,.0f} MB allocated){held}.",
        {"ooms": len(ooms), "failed_request_mb": round(last.size / 2**20, 3),
         "device_free_mb": round(last.device_free / 2**20, 3) if last.device_free is not None else None,
         "reserved_mb": t["reserved_mb"], "allocated_mb": t["allocated_mb"],
         "free_in_cache_mb": t["free_mb"], "largest_free_mb": t["largest_free_mb"],
         "top_sites": [s["site"] for s in sites]},
        "Lower the peak on this device: smaller batch or sequence chunks, free temporaries after their last use "
        "(torch.inference_mode), narrower dtypes, or spread the model over more devices; where much is reserved "
        "but free (fragmentation), PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.",
    )


@rule(source="memory")
def segment_churn(ctx) -> list[Finding]:
    """Segments the caching allocator gave back to the driver and took again inside the recorded window."""
    c = ctx.device.get("segment_churn")
    if not c or c["cycled_segments"] < MIN_CYCLED_SEGMENTS:
        return []
    why = []
    if c["emptied"]:
        why.append(f"{c['emptied']} of the frees inside torch.cuda.empty_cache")
    if c["streams"] > 1:
        why.append(f"on {c['streams']} streams (a block cached for one stream serves no other)")
    where = ", ".join(f"{s['site']} ({s['mb']:,.0f} MB)" for s in c["sites"][:2])
    freed = c["free_sites"][0]["site"] if c["free_sites"] else ""
    where += f", given back at {freed}" if freed and freed != c["sites"][0]["site"] else ""
    known = c["driver_ms_est"] is not None and c["window_ms"]
    gain = min(100.0, 100.0 * c["driver_ms_est"] / c["window_ms"]) if known else 0.0
    cost = (f"; at ~{c['driver_call_us_est']:,.0f} us a call ({c['driver_call_basis']}) the driver calls take "
            f"~{c['driver_ms_est']:,.1f} ms of the {c['window_ms']:,.1f} ms recorded, and each cudaFree first waits "
            "for the whole device" if known else "; the history has no times to price the calls")
    summary = (f"The caching allocator took {c['segment_allocs']} segments ({c['allocated_mb']:,.0f} MB) from the "
               f"driver and gave {c['segment_frees']} ({c['freed_mb']:,.0f} MB) back inside the recorded window"
               f"{' ' + '; '.join(why) if why else ''}; taken mostly at {where}{cost}.")
    evidence = {"segment_allocs": c["segment_allocs"], "segment_frees": c["segment_frees"],
                "allocated_mb": c["allocated_mb"], "freed_mb": c["freed_mb"], "cycled_segments": c["cycled_segments"],
                "cycled_mb": c["cycled_mb"], "streams": c["streams"], "segments_per_stream": c["per_stream"],
                "emptied_by_empty_cache": c["emptied"], "sites": [s["site"] for s in c["sites"]],
                "free_sites": [s["site"] for s in c["free_sites"]],
                "window_ms": c["window_ms"], "driver_call_us_est": c["driver_call_us_est"],
                "driver_call_basis": c["driver_call_basis"], "driver_ms_est": c["driver_ms_est"]}
    fix = ("Keep the memory in the cache: allocate the weights' buffers once and copy each layer into them (a ring of "
           "two or three preallocated buffers for an offloaded model), take torch.cuda.empty_cache() out of the loop, "
           "allocate on one stream and hand the buffer to the other with tensor.record_stream / wait_stream instead "
           "of allocating on each, and where memory runs short lower the peak rather than let the allocator free "
           "its cache to retry; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True grows segments in place.")
    found = _finding("allocator-churn", gain, summary, evidence, fix)
    if found or known:
        return found
    return [Finding(id="allocator-churn", severity="low", gain_pct=0.0, evidence=evidence, fix=fix, summary=summary)]
