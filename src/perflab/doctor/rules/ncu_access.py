"""Kernel rules on how the global accesses use the bytes they move: sectors beyond what the threads use
(uncoalesced-access, or poor-locality when the accesses scatter) and DRAM bytes beyond the compulsory ones
(re-reads: `reuse`, read by ncu_memory.l2_miss and, for scattered accesses, by access_pattern here).

What a fix saves comes from the one model of the kernel's time (analysis/ncu/kernel_time.py): each unit keeps
the part of its load the waste does not make, and the kernel ends when its most loaded unit is done, so waste
that never reaches the unit that limits the kernel costs nothing.
"""
from __future__ import annotations

from perflab.analysis.ncu.kernel_time import Fix
from perflab.doctor.finding import Finding
from perflab.doctor.rules.ncu_context import KernelContext, kernel_rule, make, ratio

SECTOR = 32
MAX_WIDTH = 16     # bytes per thread of the widest global access (LDG.128 / STG.128)
OPS = ("ld", "st")
REREAD = 1.25      # DRAM bytes at least this x the compulsory ones: re-reads
REUSE_DRAM_PCT = 30.0   # re-reads matter where DRAM moves at least this share of its peak


def _op(ctx: KernelContext, what: str, op: str) -> float | None:
    return ctx.m(f"l1tex__t_{what}_pipe_lsu_mem_global_op_{op}.sum")


def sector_use(ctx: KernelContext, op: str) -> tuple[float | None, float | None]:
    """(sectors, bytes the threads used of them) of global loads or stores. The bytes come from
    smsp__sass_average_data_bytes_per_sector_mem_global_op_*: 32 when every byte of every sector a warp
    touches is data it asked for, whatever the access width (a float4 load of a warp touches 16 sectors,
    all of them used)."""
    sectors = _op(ctx, "sectors", op)
    per_sector = ctx.m(f"smsp__sass_average_data_bytes_per_sector_mem_global_op_{op}.ratio")
    used = sectors * min(per_sector, SECTOR) if sectors and per_sector else None
    return sectors, used


def global_excess(ctx: KernelContext) -> tuple[float | None, str]:
    """Fraction of the sectors that global accesses move beyond what their threads use.

    In order of exactness: ncu's source counters (memory_l2_theoretical_sectors_global against its _ideal);
    the bytes per sector the threads used (smsp__sass_average_data_bytes_per_sector_mem_global_op_ld/st), which
    judges each access against its own width; else sectors per request against the widest coalesced access: a
    warp's 4-, 8- and 16-byte accesses touch 4, 8 and 16 sectors when coalesced, so without the access width
    only sectors beyond 16 per request are provably wasted (a lower bound)."""
    total = ctx.m("memory_l2_theoretical_sectors_global")
    ideal = ctx.m("memory_l2_theoretical_sectors_global_ideal")
    if total and ideal is not None:
        return max(0.0, (total - ideal) / total), "memory_l2_theoretical_sectors_global vs _ideal"
    uses = [sector_use(ctx, op) for op in OPS]
    if all(s is not None and (u is not None or s == 0) for s, u in uses) and sum(s for s, _ in uses):
        sectors = sum(s for s, _ in uses)
        used = sum(u or 0.0 for _, u in uses)
        return max(0.0, 1 - used / (sectors * SECTOR)), "bytes used per sector of global loads and stores"
    spr = ratio(_op(ctx, "sectors", "ld"), _op(ctx, "requests", "ld"))
    if spr:
        return (max(0.0, 1 - MAX_WIDTH / spr),
                f"global load sectors per request vs {MAX_WIDTH} (16-byte accesses; the width is not in the report)")
    return None, ""


def used_bytes(ctx: KernelContext, excess: float) -> float | None:
    """The global bytes the threads use (loads and stores): what DRAM would have to move were every access
    coalesced and nothing re-read."""
    uses = [sector_use(ctx, op) for op in OPS]
    if all(u is not None or s == 0 for s, u in uses) and any(s for s, _ in uses):
        return sum(u or 0.0 for _, u in uses)
    sectors = [s for s, _ in uses if s is not None]
    return sum(sectors) * SECTOR * (1 - excess) if sectors else None


def waste_by_unit(ctx: KernelContext, excess: float) -> dict[str, float]:
    """Each memory unit's share of its traffic that the wasted sectors make. L1 and L2 move every sector a
    warp requests; DRAM only the ones that miss L2: a sector another warp uses later (its neighbours' strided
    stores, a transpose's columns) reaches DRAM once, as data. DRAM's waste is its bytes beyond the bytes
    the threads use (at most the sector waste)."""
    out = {u: excess for u in ctx.units.memory if u != "DRAM"}
    if "DRAM" in ctx.units.memory:
        t = ctx.traffic
        dram = (t.dram_read_bytes or 0.0) + (t.dram_write_bytes or 0.0)
        used = used_bytes(ctx, excess)
        out["DRAM"] = min(excess, max(0.0, 1 - used / dram)) if dram and used is not None else excess
    return out


def _overfetch(ctx: KernelContext) -> float | None:
    """L2 fetches 64 B per miss; ~2 missed sectors per requested one = isolated 32-byte touches (scatter)."""
    miss = ctx.m("lts__t_sectors_srcunit_tex_aperture_device_op_read_lookup_miss.sum")
    req = ctx.m("lts__t_sectors_srcunit_tex_op_read.sum")
    req_hit = ctx.m("lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum")
    return ratio(miss, (req - req_hit) if req is not None and req_hit is not None else None)


def _waste_in_stores(ctx: KernelContext) -> bool:
    use_ld = ctx.m("smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio")
    use_st = ctx.m("smsp__sass_average_data_bytes_per_sector_mem_global_op_st.ratio")
    if use_st is not None:
        return use_ld is not None and use_st < use_ld
    spr_ld = ratio(_op(ctx, "sectors", "ld"), _op(ctx, "requests", "ld"))
    spr_st = ratio(_op(ctx, "sectors", "st"), _op(ctx, "requests", "st"))
    return spr_st is not None and spr_st > 2 * max(spr_ld or 0, 4)


def scattered(ctx: KernelContext) -> bool:
    """Wasted sectors in the loads with a poor L2 hit rate (and isolated 32-byte misses where measured): the
    accesses scatter and defeat the caches too (poor-locality), not just a layout that L2 absorbs."""
    excess, _ = global_excess(ctx)
    hit = ctx.l2_read_hit_pct
    over = _overfetch(ctx)
    return (excess is not None and excess >= 0.25 and not _waste_in_stores(ctx) and hit is not None and hit < 50
            and (over is None or over >= 1.5))


def reuse(ctx: KernelContext) -> dict | None:
    """DRAM bytes clearly above the compulsory ones, on a kernel whose DRAM is busy: {dram_bytes,
    compulsory_bytes, basis, matrix}. A matrix product's compulsory bytes come from its FLOPs and launch
    (analysis/ncu/matrix_work.py); any other kernel's from analysis/ncu/ncu_traffic.py (bytes written plus as
    many read), where L2 hits prove that it re-reads data and its reads exceed what L2 holds. None where no
    estimate can be made."""
    t = ctx.traffic
    rd, wr = t.dram_read_bytes, t.dram_write_bytes or 0.0
    if rd is None or ctx.dram_pct < REUSE_DRAM_PCT:
        return None
    total = rd + wr
    mw = ctx.matrix
    if mw is not None:
        comp = mw.compulsory_bytes
        if comp is None or mw.gemv_like or total < REREAD * comp:
            return None   # a tiled or tensor-core product re-reads by design, within what the estimate can tell
        return {"dram_bytes": total, "compulsory_bytes": comp, "basis": mw.compulsory_basis, "matrix": True}
    hit = t.l2_read_hit_pct
    if hit is None or not 10 <= hit < 60 or t.compulsory_bytes is None or (t.l2_bytes and rd < t.l2_bytes):
        return None  # no sign of reuse, no estimate, or all reads fit in L2 (misses are first touches)
    if total < REREAD * t.compulsory_bytes:
        return None
    return {"dram_bytes": total, "compulsory_bytes": t.compulsory_bytes, "basis": t.compulsory_basis,
            "matrix": False}


def reuse_fix(ctx: KernelContext, r: dict, kept_sectors: float = 1.0) -> Fix:
    """DRAM (and L2, which carries every DRAM byte) down to the compulsory bytes; a matrix product tiled: its
    compute pipes keep their work, its operands come from shared memory, DRAM moves the compulsory bytes."""
    keep = r["compulsory_bytes"] / r["dram_bytes"]
    if r["matrix"]:
        pipes = {u: 1.0 for u in ctx.units.compute if u not in ("SM", "LSU pipe")}
        return Fix(kept={**pipes, "DRAM": keep, "L2": keep}, only=True,
                   symptom_share=(1 - keep) * ctx.dram_pct / 100,
                   how="tiled through shared memory: DRAM moves the compulsory bytes, the FMA work stays, at the "
                       "practical pace of its busiest unit")
    return Fix(kept={"DRAM": keep, "L2": min(1.0, keep * kept_sectors)}, paced=False,
               symptom_share=(1 - keep) * ctx.dram_pct / 100,
               how="DRAM and L2 move the compulsory bytes; the kernel keeps its pace")


def reuse_text(matrix: bool) -> str:
    if matrix:
        return ("Tile the product: load a tile of each input into shared memory once per block and reuse it for "
                "every output the block computes (a 128 x 128 tile reads each input 128x less), or call a library "
                "GEMM (cuBLAS, CUTLASS, torch.matmul) that does.")
    return ("Shorten reuse distance: process the data that is re-read together (tile / block the loop, "
            "raster the grid so neighbouring blocks share inputs), or pin the hot part in L2 with an "
            "access-policy window. (If the kernel reads several distinct inputs per output, the extra "
            "bytes are compulsory, not re-reads.)")


@kernel_rule
def access_pattern(ctx: KernelContext) -> Finding | None:
    """uncoalesced-access / poor-locality: sectors moved beyond what the threads use; L2 hit rate tells them apart.

    Excess sectors with a good L2 read hit rate mean neighbouring lanes' data is reused from L2 later
    (a layout/indexing problem: coalescing). Excess sectors with a poor hit rate mean scattered access
    that defeats the caches as well (locality); where that kernel also re-reads DRAM beyond its compulsory
    bytes, making the accesses local removes both. The gain is what the waste costs at the unit that limits
    the kernel: none for a DRAM-bound kernel whose extra sectors never reach DRAM."""
    excess, how = global_excess(ctx)
    if excess is None or excess < 0.25 or ctx.mem_pct < 20:
        return None
    hit = ctx.l2_read_hit_pct
    spr_ld = ratio(_op(ctx, "sectors", "ld"), _op(ctx, "requests", "ld"))
    spr_st = ratio(_op(ctx, "sectors", "st"), _op(ctx, "requests", "st"))
    use_ld = ctx.m("smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio")
    use_st = ctx.m("smsp__sass_average_data_bytes_per_sector_mem_global_op_st.ratio")
    waste = waste_by_unit(ctx, excess)
    local = scattered(ctx)
    rereads = reuse(ctx) if local else None
    change = Fix(kept={u: 1 - w for u, w in waste.items()}, paced=False, symptom_share=max(
        (v / 100 * waste.get(u, 0.0) for u, v in ctx.units.memory.items()), default=0.0),
        how="the wasted sectors gone at every unit that moves them (DRAM: its bytes beyond those the threads use); "
            "the kernel keeps its pace")
    if rereads is not None:
        reread = reuse_fix(ctx, rereads, kept_sectors=1 - waste.get("L2", 0.0))
        change = Fix(kept={**change.kept, **reread.kept}, only=reread.only, paced=reread.paced,
                     symptom_share=max(change.symptom_share or 0.0, reread.symptom_share or 0.0),
                     how=f"{change.how}; and {reread.how}")
    ev = {"excess_sector_pct": 100 * excess, "measured_by": how, "l2_read_hit_pct": hit,
          "l2_miss_overfetch": _overfetch(ctx), "sectors_per_store_request": spr_st,
          "memory_throughput_pct": ctx.mem_pct, "dram_throughput_pct": ctx.dram_pct,
          "sectors_per_load_request": spr_ld, "used_bytes_per_load_sector": use_ld,
          "used_bytes_per_store_sector": use_st, "dram_waste_pct": 100 * waste["DRAM"] if "DRAM" in waste else None,
          **({"dram_bytes": rereads["dram_bytes"], "compulsory_bytes_est": rereads["compulsory_bytes"],
              "compulsory_estimate": rereads["basis"]} if rereads else {})}
    est = ctx.estimate(change)
    where = (f"; they cost nothing at {est.limit}, which limits it either way"
             if est is not None and est.gain_pct < 3 and est.limit else "")
    if local:
        again = (f", and DRAM moves {rereads['dram_bytes'] / rereads['compulsory_bytes']:.1f}x the bytes it must"
                 if rereads else "")
        fix = ("Make the access pattern local: sort or bucket the indices, gather through shared memory, "
               "or reorder the data so that a warp reads contiguous 128-byte lines.")
        if rereads and rereads["matrix"]:
            fix = f"{reuse_text(True)} {fix}"
        return make(ctx, "poor-locality", change, ev, fix,
                    f"{100 * excess:.0f} % of global sectors are wasted and L2 hits only {hit:.0f} % of reads"
                    f"{again}{where}")
    per_req = (f" ({spr_ld:.1f} sectors per load request, {spr_st or 0:.1f} per store"
               + (f"; {use_ld:.0f} of 32 bytes used per load sector, {use_st or 0:.0f} per store sector)"
                  if use_ld is not None else ")") if spr_ld is not None else "")
    return make(ctx, "uncoalesced-access", change, ev,
                "Coalesce: have consecutive threads touch consecutive addresses (transpose through shared "
                "memory, change the layout to structure-of-arrays, or swap the index mapping).",
                f"{100 * excess:.0f} % of the global sectors requested are beyond what the threads use{per_req}{where}")
