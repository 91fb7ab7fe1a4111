"""Kernel-level rules over Nsight Compute metrics (taxonomy level `kernel`): access patterns and
instruction-level waste. The memory-traffic rules are in ncu_memory.py, the launch rules in ncu_launch.py,
what limits the kernel (a unit at its roof, or why none is) in ncu_limits.py.

Each rule reads documented ncu metrics of one kernel launch and returns at most one Finding with the
numbers it used. Gains are estimates of the kernel time that the fix would save (capped at 90 %),
scaled by how busy the unit that the problem loads is, so that a waste pattern on an idle unit does not
outrank the thing that actually limits the kernel. A metric the report lacks makes its rule stay silent.
"""
from __future__ import annotations

import math

from perflab.analysis.work.gemm_shapes import gemm_dims, gemm_tile
from perflab.doctor.finding import Finding
from perflab.doctor.rules.ncu_context import (AT_ROOF_PCT, GEMM_NAME, KernelContext, kernel_rule, make,
                                              next_busiest, ratio)


SECTOR = 32
MAX_WIDTH = 16     # bytes per thread of the widest global access (LDG.128 / STG.128)
OPS = ("ld", "st")


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


def gain_at_limit(ctx: KernelContext, waste: dict[str, float]) -> tuple[float, str | None, float]:
    """Kernel time the waste costs, in % of the kernel's time. With a unit at its roof the kernel is throughput
    bound: the busiest unit's load now less the busiest unit's load without the waste (compute units keep
    theirs), so waste on a unit that does not limit the kernel costs nothing. Below every roof the time is
    latency, and the waste costs in proportion to the load it adds to the unit it burdens most. Returns (gain,
    the unit that would be busiest without the waste, its load then)."""
    now = {**ctx.units.memory, **ctx.units.compute}
    if not now:
        return 0.0, None, 0.0
    after = {u: v * (1 - waste.get(u, 0.0)) for u, v in now.items()}
    unit, load = max(after.items(), key=lambda kv: kv[1])
    top = max(now.values())
    if top >= AT_ROOF_PCT:
        return max(0.0, top - load), unit, load
    return max(v * waste.get(u, 0.0) for u, v in now.items()), unit, load


@kernel_rule
def access_pattern(ctx: KernelContext) -> Finding | None:
    """uncoalesced-access / poor-locality: sectors moved beyond what the threads use; L2 hit rate tells them apart.

    Excess sectors with a good L2 read hit rate mean neighbouring lanes' data is reused from L2 later
    (a layout/indexing problem: coalescing). Excess sectors with a poor hit rate mean scattered access
    that defeats the caches as well (locality). The gain is what the waste costs at the unit that limits
    the kernel (gain_at_limit): none for a DRAM-bound kernel whose extra sectors never reach DRAM."""
    excess, how = global_excess(ctx)
    if excess is None or excess < 0.25 or ctx.mem_pct < 20:
        return None
    hit = ctx.l2_read_hit_pct
    spr_ld = ratio(_op(ctx, "sectors", "ld"), _op(ctx, "requests", "ld"))
    spr_st = ratio(_op(ctx, "sectors", "st"), _op(ctx, "requests", "st"))
    use_ld = ctx.m("smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio")
    use_st = ctx.m("smsp__sass_average_data_bytes_per_sector_mem_global_op_st.ratio")
    stores = (use_st is not None and use_ld is not None and use_st < use_ld) if use_st is not None else (
        spr_st is not None and spr_st > 2 * max(spr_ld or 0, 4))  # the waste is in the stores
    # L2 fetches 64 B per miss; ~2 missed sectors per requested one = isolated 32-byte touches (scatter)
    miss = ctx.m("lts__t_sectors_srcunit_tex_aperture_device_op_read_lookup_miss.sum")
    req = ctx.m("lts__t_sectors_srcunit_tex_op_read.sum")
    req_hit = ctx.m("lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum")
    overfetch = ratio(miss, (req - req_hit) if req is not None and req_hit is not None else None)
    waste = waste_by_unit(ctx, excess)
    gain, then_unit, then_pct = gain_at_limit(ctx, waste)
    ev = {"excess_sector_pct": 100 * excess, "measured_by": how, "l2_read_hit_pct": hit,
          "l2_miss_overfetch": overfetch, "sectors_per_store_request": spr_st,
          "memory_throughput_pct": ctx.mem_pct, "dram_throughput_pct": ctx.dram_pct,
          "sectors_per_load_request": spr_ld, "used_bytes_per_load_sector": use_ld,
          "used_bytes_per_store_sector": use_st, "dram_waste_pct": 100 * waste["DRAM"] if "DRAM" in waste else None,
          "limit_without_waste": then_unit, "limit_without_waste_pct": then_pct}
    where = (f"; they cost nothing at {then_unit}, which limits it at {then_pct:.0f} % either way"
             if gain < 3 and then_unit else "")
    if not stores and hit is not None and hit < 50 and (overfetch is None or overfetch >= 1.5):
        return make(ctx, "poor-locality", gain, ev,
                    "Make the access pattern local: sort or bucket the indices, gather through shared memory, "
                    "or reorder the data so that a warp reads contiguous 128-byte lines.",
                    f"{100 * excess:.0f} % of global sectors are wasted and L2 hits only {hit:.0f} % of reads{where}")
    per_req = (f" ({spr_ld:.1f} sectors per load request, {spr_st or 0:.1f} per store"
               + (f"; {use_ld:.0f} of 32 bytes used per load sector, {use_st or 0:.0f} per store sector)"
                  if use_ld is not None else ")") if spr_ld is not None else "")
    return make(ctx, "uncoalesced-access", gain, ev,
                "Coalesce: have consecutive threads touch consecutive addresses (transpose through shared "
                "memory, change the layout to structure-of-arrays, or swap the index mapping).",
                f"{100 * excess:.0f} % of the global sectors requested are beyond what the threads use{per_req}{where}")


@kernel_rule
def bank_conflicts(ctx: KernelContext) -> Finding | None:
    """Shared-memory wavefronts beyond the ideal (memory_l1_wavefronts_shared vs _ideal), or the
    l1tex__data_bank_conflicts_pipe_lsu_mem_shared_* share of shared wavefronts."""
    wf, ideal = ctx.m("memory_l1_wavefronts_shared"), ctx.m("memory_l1_wavefronts_shared_ideal")
    if wf and ideal is not None:
        excess, how = max(0.0, (wf - ideal) / wf), "memory_l1_wavefronts_shared vs _ideal"
    else:
        conflicts = sum(v or 0 for v in (ctx.m("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"),
                                          ctx.m("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum")))
        waves = sum(v or 0 for v in (ctx.m("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"),
                                      ctx.m("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum")))
        if not waves:
            return None
        excess, how = conflicts / waves, "l1tex bank conflicts / shared wavefronts"
    if excess < 0.2 or ctx.l1_pct < 20:
        return None
    # Without the replays L1/shared does (1 - excess) of its work; the busiest other unit then may set the pace.
    nxt, npct = next_busiest(ctx, "L1/shared")
    l1 = ctx.l1_pct
    bound = 100 * (1 - max(l1 * (1 - excess), npct) / l1)
    share = excess * l1
    gain = min(share, bound)
    if gain < 3:
        return None   # another unit is as busy as L1 would be without the replays: they cost no time
    paced = f"; without them {nxt}, at {npct:.0f} % of peak, would set the pace" if nxt and bound < 0.8 * share else ""
    return make(ctx, "bank-conflicts", gain,
                {"excess_wavefront_pct": 100 * excess, "measured_by": how, "l1_throughput_pct": l1,
                 "shared_wavefronts": wf, "shared_wavefronts_ideal": ideal, "next_unit": nxt, "next_unit_pct": npct},
                "Pad shared arrays by one word per row (tile[32][33]) or swizzle the index so that a warp's "
                "lanes fall in different banks; for 16-byte accesses pad by 16 bytes.",
                f"{100 * excess:.0f} % of shared-memory wavefronts are bank-conflict replays{paced}")


@kernel_rule
def warp_divergence(ctx: KernelContext) -> Finding | None:
    """smsp__thread_inst_executed_per_inst_executed.ratio: active threads per executed instruction (of 32).
    The idle lanes waste the SM's issue slots and pipes; they cost time only where the SM side limits the
    kernel (gain_at_limit): a divergent kernel at its DRAM roof waits on DRAM either way."""
    r = ctx.m("smsp__thread_inst_executed_per_inst_executed.ratio")
    if r is None or r >= 24:
        return None
    waste = 1 - r / 32
    lanes = 100 * waste * max(ctx.compute_pct, 30) / 100
    if ctx.busiest_pct >= AT_ROOF_PCT:
        lanes = min(lanes, gain_at_limit(ctx, {u: waste for u in ctx.units.compute})[0])
    return make(ctx, "warp-divergence", lanes,
                {"threads_per_instruction": r, "sm_throughput_pct": ctx.compute_pct,
                 "branch_instruction_pct": ctx.m("derived__smsp__inst_executed_op_branch_pct")},
                "Make the branch uniform per warp: sort or bin the work so that a warp's 32 threads take the "
                "same path, move the choice to the block or warp level, or compute both sides branch-free.",
                f"only {r:.1f} of 32 threads are active per instruction")


def is_matmul(ctx: KernelContext) -> bool:
    """Tensor-core work, or a kernel named like a GEMM."""
    tensor = sum(v for p, v in kernel_work_flops(ctx).items() if p.startswith("tensor_"))
    return tensor > 0 or bool(GEMM_NAME.search(ctx.k.name))


@kernel_rule
def no_tensor_cores(ctx: KernelContext) -> Finding | None:
    """Matrix work on the FP32 SIMT pipe: FFMA dominates the instruction mix and is fed by loads at a
    matmul-like ratio (or the name says GEMM/SIMT), while the tensor pipe is idle."""
    tensor = ctx.m("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
                   "sm__inst_executed_pipe_tensor.sum")
    tensor_ops = ctx.point.flops - sum(v for p, v in _simt(ctx).items())
    if (tensor or 0) >= 1 or tensor_ops > 0:
        return None
    ffma = ctx.m("sm__sass_thread_inst_executed_op_ffma_pred_on.sum")
    inst = ctx.m("smsp__inst_executed.sum")
    if not ffma or not inst:
        return None
    ffma_warp = ffma / 32
    ffma_share = ffma_warp / inst
    loads = sum(v or 0 for v in (ctx.m("smsp__sass_inst_executed_op_shared_ld.sum"),
                                  ctx.m("smsp__sass_inst_executed_op_global_ld.sum")))
    fed = loads > 0 and ffma_warp / loads <= 64
    named = bool(GEMM_NAME.search(ctx.k.name))
    if not ((ffma_share >= 0.25 and fed) or (named and ffma_share >= 0.1)) or ctx.compute_pct < 20:
        return None
    achieved = ctx.point.flops_per_s
    target = 0.5 * ctx.tensor_roof_flops  # half the TF32 tensor roof: what a plain cuBLAS TF32 call reaches
    return make(ctx, "no-tensor-cores", 100 * (1 - achieved / target),
                {"fp32_tflops": achieved / 1e12, "ffma_share_of_instructions_pct": 100 * ffma_share,
                 "ffma_per_load": ffma_warp / loads if loads else None, "tensor_pipe_pct": tensor,
                 "name_says_matmul": named},
                "Run the matrix product on tensor cores: torch.matmul with TF32 allowed "
                "(torch.backends.cuda.matmul.allow_tf32 = True) or bf16/fp16 inputs, cuBLAS/CUTLASS, or "
                "mma/wgmma in a custom kernel.",
                f"matrix work on FP32 FFMA at {achieved / 1e12:.1f} TFLOP/s with the tensor pipe idle")


def kernel_work_flops(ctx: KernelContext) -> dict[str, float]:
    from perflab.analysis.work.roofline import kernel_work

    return kernel_work(ctx.k).flops


def _simt(ctx: KernelContext) -> dict[str, float]:
    return {p: v for p, v in kernel_work_flops(ctx).items() if not p.startswith("tensor_")}


@kernel_rule
def tile_quantization(ctx: KernelContext) -> Finding | None:
    """The GEMM's M x N rounded up to the kernel's tile (tile from the kernel name, shape from NVTX):
    the padding is computed and thrown away. Where NVTX also gives K (and the batch), the tensor-core
    work the kernel executed (sm__ops_path_tensor_*) is held against the useful 2*M*N*K*batch: the
    measured waste, which needs no tile in the name."""
    dims = gemm_dims(ctx.k.nvtx)
    if not dims:
        return None
    m, n = dims["M"], dims["N"]
    tile = gemm_tile(ctx.k.full_name or ctx.k.name)
    ev: dict = {"gemm_m": m, "gemm_n": n, "gemm_k": dims.get("K"), "batch": dims.get("batch")}
    waste = measured = None
    if tile:
        tm, tn = tile
        padded = math.ceil(m / tm) * tm * math.ceil(n / tn) * tn
        waste = 1 - (m * n) / padded
        ev.update({"tile_m": tm, "tile_n": tn, "padded_area": padded, "wasted_work_pct": 100 * waste})
    executed = sum(v for p, v in kernel_work_flops(ctx).items() if p.startswith("tensor_"))
    if "K" in dims and executed > 0:
        useful = 2.0 * m * n * dims["K"] * dims.get("batch", 1)
        if useful <= 1.05 * executed:  # more useful work than executed: the range does not describe this kernel
            measured = max(0.0, 1 - useful / executed)
            ev.update({"executed_tensor_flops": executed, "useful_flops": useful,
                       "measured_wasted_work_pct": 100 * measured})
    # The counters decide. A kernel that executed the range's useful work and no more pads nothing, whatever
    # tile its name claims (a name can outlive a change of config). Where the counters exceed the range's work
    # but disagree with the name's tile, the range may describe another GEMM: the name's tile decides.
    if measured is not None and measured < 0.05:
        return None
    use_counters = measured is not None and (waste is None or abs(measured - waste) < 0.1)
    best = measured if use_counters else waste
    if best is None or best < 0.1:
        return None
    how = (f"{m}x{n} on {tile[0]}x{tile[1]} tiles" if tile else f"{m}x{n}") + (
        f": {100 * measured:.0f} % of the executed tensor-core work is padding" if use_counters
        else f": {100 * waste:.0f} % of the computed tile area is padding")
    return make(ctx, "tile-quantization", 100 * best, ev,
                "Pick sizes that are multiples of the tile (pad M/N up front, batch small GEMMs together) or "
                "a kernel with a smaller tile for this shape.", how)
