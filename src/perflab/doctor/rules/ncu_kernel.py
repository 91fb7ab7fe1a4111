"""Kernel-level rules over Nsight Compute metrics (taxonomy level `kernel`).

Each rule reads documented ncu metrics of one kernel launch and returns at most one Finding with the
numbers it used. Gains are estimates of the kernel time that the fix would save (capped at 90 %),
scaled by how busy the unit that the problem loads is, so that a waste pattern on an idle unit does not
outrank the thing that actually limits the kernel. A metric the report lacks makes its rule stay silent.
"""
from __future__ import annotations

import math

from perflab.analysis.gemm_shapes import gemm_dims, gemm_tile
from perflab.doctor.finding import Finding
from perflab.doctor.rules.ncu_context import AT_ROOF_PCT, GEMM_NAME, RULES, KernelContext, kernel_rule, make, ratio


def global_excess(ctx: KernelContext) -> tuple[float | None, str]:
    """Fraction of the L2 sectors that global accesses request beyond a perfectly coalesced pattern.

    ncu's source counters give both (memory_l2_theoretical_sectors_global and its _ideal); without them
    fall back to sectors per request against 4 (one 32-bit word per lane), which is approximate."""
    total = ctx.m("memory_l2_theoretical_sectors_global")
    ideal = ctx.m("memory_l2_theoretical_sectors_global_ideal")
    if total and ideal is not None:
        return max(0.0, (total - ideal) / total), "memory_l2_theoretical_sectors_global vs _ideal"
    spr = ratio(ctx.m("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"),
                 ctx.m("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"))
    if spr:
        return max(0.0, 1 - 4 / spr), "l1tex global load sectors per request vs 4 (approximate)"
    return None, ""


@kernel_rule
def access_pattern(ctx: KernelContext) -> Finding | None:
    """uncoalesced-access / poor-locality: excess sectors per request; L2 hit rate tells them apart.

    Excess sectors with a good L2 read hit rate mean neighbouring lanes' data is reused from L2 later
    (a layout/indexing problem: coalescing). Excess sectors with a poor hit rate mean scattered access
    that defeats the caches as well (locality)."""
    excess, how = global_excess(ctx)
    if excess is None or excess < 0.25 or ctx.mem_pct < 20:
        return None
    hit = ctx.l2_read_hit_pct
    spr_ld = ratio(ctx.m("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"), ctx.m("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"))
    spr_st = ratio(ctx.m("l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"), ctx.m("l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"))
    stores = spr_st is not None and spr_st > 2 * max(spr_ld or 0, 4)  # the waste is in the stores
    # L2 fetches 64 B per miss; ~2 missed sectors per requested one = isolated 32-byte touches (scatter)
    miss = ctx.m("lts__t_sectors_srcunit_tex_aperture_device_op_read_lookup_miss.sum")
    req = ctx.m("lts__t_sectors_srcunit_tex_op_read.sum")
    req_hit = ctx.m("lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum")
    overfetch = ratio(miss, (req - req_hit) if req is not None and req_hit is not None else None)
    ev = {"excess_sector_pct": 100 * excess, "measured_by": how, "l2_read_hit_pct": hit,
          "l2_miss_overfetch": overfetch, "sectors_per_store_request": spr_st,
          "memory_throughput_pct": ctx.mem_pct, "dram_throughput_pct": ctx.dram_pct,
          "sectors_per_load_request": ratio(ctx.m("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"),
                                             ctx.m("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"))}
    gain = 100 * excess * ctx.mem_pct / 100
    if not stores and hit is not None and hit < 50 and (overfetch is None or overfetch >= 1.5):
        return make(ctx, "poor-locality", gain, ev,
                    "Make the access pattern local: sort or bucket the indices, gather through shared memory, "
                    "or reorder the data so that a warp reads contiguous 128-byte lines.",
                    f"{100 * excess:.0f} % of global sectors are wasted and L2 hits only {hit:.0f} % of reads")
    return make(ctx, "uncoalesced-access", gain, ev,
                "Coalesce: have consecutive threads touch consecutive addresses (transpose through shared "
                "memory, change the layout to structure-of-arrays, or swap the index mapping).",
                f"{100 * excess:.0f} % of the global sectors requested are beyond a coalesced pattern")


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
    return make(ctx, "bank-conflicts", 100 * excess * ctx.l1_pct / 100,
                {"excess_wavefront_pct": 100 * excess, "measured_by": how, "l1_throughput_pct": ctx.l1_pct,
                 "shared_wavefronts": wf, "shared_wavefronts_ideal": ideal},
                "Pad shared arrays by one word per row (tile[32][33]) or swizzle the index so that a warp's "
                "lanes fall in different banks; for 16-byte accesses pad by 16 bytes.",
                f"{100 * excess:.0f} % of shared-memory wavefronts are bank-conflict replays")


@kernel_rule
def register_spill(ctx: KernelContext) -> Finding | None:
    """Local-memory instructions (smsp__sass_inst_executed_op_local_ld/st): registers spilled to the stack."""
    local = [ctx.m("smsp__sass_inst_executed_op_local_ld.sum"), ctx.m("smsp__sass_inst_executed_op_local_st.sum")]
    if all(v is None for v in local):
        spills = ctx.m("derived__local_spilling_requests")
        if not spills:
            return None
        local = [spills, 0.0]
    n_local = sum(v or 0 for v in local)
    if n_local <= 0:
        return None
    others = sum(v or 0 for v in (ctx.m("smsp__sass_inst_executed_op_global_ld.sum"),
                                   ctx.m("smsp__sass_inst_executed_op_global_st.sum"),
                                   ctx.m("smsp__sass_inst_executed_op_shared_ld.sum"),
                                   ctx.m("smsp__sass_inst_executed_op_shared_st.sum")))
    share = n_local / (n_local + others)
    if share < 0.05:
        return None
    return make(ctx, "register-spill", 100 * share * max(ctx.mem_pct, ctx.compute_pct) / 100,
                {"local_memory_instructions": n_local, "local_share_of_memory_instructions_pct": 100 * share,
                 "registers_per_thread": ctx.k.registers, "spilling_requests": ctx.m("derived__local_spilling_requests"),
                 "dram_write_bytes": ctx.m("dram__bytes_write.sum")},
                "Cut live registers: fewer accumulators per thread, no run-time indexing of local arrays, or "
                "relax the cap (__launch_bounds__ / -maxrregcount) so the compiler can keep them in registers.",
                f"{100 * share:.0f} % of memory instructions go to local memory (spilled registers)")


@kernel_rule
def atomic_contention(ctx: KernelContext) -> Finding | None:
    """Atomics piling onto a few addresses: the busiest L2 slice's atomic unit
    (lts__d_atomic_input_cycles_active.max) far above the average slice, and either saturated or the
    only thing the kernel keeps busy."""
    n_atomic = sum(v or 0 for v in (ctx.m("smsp__sass_inst_executed_op_global_atom.sum"),
                                     ctx.m("smsp__sass_inst_executed_op_global_red.sum")))
    if n_atomic <= 0:
        return None
    hot = ctx.m("lts__d_atomic_input_cycles_active.max.pct_of_peak_sustained_elapsed")
    avg = ctx.m("lts__d_atomic_input_cycles_active.avg.pct_of_peak_sustained_elapsed")
    mem_instr = n_atomic + sum(v or 0 for v in (ctx.m("smsp__sass_inst_executed_op_global_ld.sum"),
                                                 ctx.m("smsp__sass_inst_executed_op_global_st.sum")))
    atomic_share = n_atomic / mem_instr if mem_instr else 0.0
    busy = max(ctx.mem_pct, ctx.compute_pct)
    # many atomics in a kernel that keeps every unit idle: updates of one address wait for each other's
    # read-modify-write, so the hot slice's unit can be far from saturated while nothing else runs
    starved = atomic_share >= 0.1 and busy < 30
    if hot is not None and avg is not None:
        if hot < 4 * max(avg, 1e-9) or (hot < 40 and not starved):
            return None
        gain = hot * (1 - avg / hot) if hot >= 40 else 100 - busy / 0.8
    else:  # without the per-slice counter
        if not starved:
            return None
        gain = 100 - busy / 0.8
    return make(ctx, "atomic-contention", gain,
                {"atomic_instructions": n_atomic, "atomic_share_of_global_instructions_pct": 100 * atomic_share,
                 "hottest_l2_slice_atomic_busy_pct": hot, "average_l2_slice_atomic_busy_pct": avg,
                 "lg_throttle_stall_pct": ctx.m("smsp__warp_issue_stalled_lg_throttle_per_warp_active.pct"),
                 "memory_throughput_pct": ctx.mem_pct},
                "Spread the updates: privatize per block in shared memory (or per warp with warp-aggregated "
                "atomics / a __reduce_add_sync) and merge once per block; widen the bins or hash the addresses.",
                "atomics serialize on a few addresses: one L2 slice's atomic unit is saturated")


@kernel_rule
def warp_divergence(ctx: KernelContext) -> Finding | None:
    """smsp__thread_inst_executed_per_inst_executed.ratio: active threads per executed instruction (of 32)."""
    r = ctx.m("smsp__thread_inst_executed_per_inst_executed.ratio")
    if r is None or r >= 24:
        return None
    return make(ctx, "warp-divergence", 100 * (1 - r / 32) * max(ctx.compute_pct, 30) / 100,
                {"threads_per_instruction": r, "sm_throughput_pct": ctx.compute_pct,
                 "branch_instruction_pct": ctx.m("derived__smsp__inst_executed_op_branch_pct")},
                "Make the branch uniform per warp: sort or bin the work so that a warp's 32 threads take the "
                "same path, move the choice to the block or warp level, or compute both sides branch-free.",
                f"only {r:.1f} of 32 threads are active per instruction")


@kernel_rule
def tail_effect(ctx: KernelContext) -> Finding | None:
    """launch__waves_per_multiprocessor just above an integer: the last wave runs on few SMs."""
    waves = ctx.m("launch__waves_per_multiprocessor")
    grid = ctx.m("launch__grid_size")
    sms = ctx.m("device__attribute_multiprocessor_count")
    if waves is None or waves <= 0:
        return None
    limits = [v for v in (ctx.m(f"launch__occupancy_limit_{k}") for k in ("registers", "shared_mem", "warps", "blocks"))
              if v]
    if grid and sms and limits and abs(grid / (sms * min(limits)) - waves) < 0.01:
        waves = grid / (sms * min(limits))  # ncu rounds waves to two decimals: 133 blocks on 132 SMs reads 1.01
    if waves > 1:
        full = math.ceil(waves - 1e-9)
        idle = 1 - waves / full
    elif grid and sms and grid < sms:
        full, idle = 1, 1 - grid / sms
    else:
        return None
    busiest = max(ctx.mem_pct, ctx.compute_pct)
    if idle < 0.1 or full > 16 or busiest >= AT_ROOF_PCT:
        return None  # a kernel at a roof over its whole duration lost little to its last wave
    return make(ctx, "tail-effect", 100 * min(idle, 1 - busiest / 100),
                {"waves_per_sm": waves, "grid_blocks": grid, "sms": sms, "idle_sm_time_pct": 100 * idle,
                 "sm_throughput_pct": ctx.compute_pct},
                "Size the grid to whole waves: a persistent grid (SMs x blocks per SM) looping over the work, "
                "more and smaller blocks, or split the last wave's work across all SMs.",
                f"{waves:.2f} waves: the last wave leaves {100 * idle:.0f} % of SM time idle")


@kernel_rule
def low_occupancy(ctx: KernelContext) -> Finding | None:
    """sm__warps_active.avg.pct_of_peak_sustained_active low while no unit is near its peak: too few
    warps to hide latency. The limiter is the smallest launch__occupancy_limit_*."""
    achieved = ctx.m("sm__warps_active.avg.pct_of_peak_sustained_active")
    busiest = max(ctx.mem_pct, ctx.compute_pct)
    if achieved is None or achieved >= 25 or busiest >= 60:
        return None
    limits = {k: ctx.m(f"launch__occupancy_limit_{k}") for k in ("registers", "shared_mem", "warps", "blocks")}
    known = {k: v for k, v in limits.items() if v is not None}
    limiter = min(known, key=known.get) if known else None
    return make(ctx, "low-occupancy", 100 * (1 - busiest / AT_ROOF_PCT) * (1 - achieved / 50),
                {"achieved_occupancy_pct": achieved,
                 "theoretical_occupancy_pct": ctx.m("sm__maximum_warps_per_active_cycle_pct"),
                 "limited_by": limiter, "blocks_per_sm_limit": known.get(limiter) if limiter else None,
                 "registers_per_thread": ctx.k.registers, "shared_mem_per_block_bytes": ctx.k.shared_mem_bytes,
                 "block": ctx.k.block, "busiest_unit_pct": busiest},
                "Raise resident warps: smaller shared-memory or register footprint per block, larger blocks, "
                "or more independent work per thread (unrolled loads) to keep more bytes in flight.",
                f"{achieved:.1f} % of warp slots occupied (limited by {limiter}), every unit under {busiest:.0f} %")


def is_matmul(ctx: KernelContext) -> bool:
    """Tensor-core work, or a kernel named like a GEMM."""
    tensor = sum(v for p, v in kernel_work_flops(ctx).items() if p.startswith("tensor_"))
    return tensor > 0 or bool(GEMM_NAME.search(ctx.k.name))


@kernel_rule
def l2_miss(ctx: KernelContext) -> Finding | None:
    """Partial L2 read hit rate (lts__t_sector_op_read_hit_rate) on a DRAM-heavy, coalesced kernel.

    A pure stream hits ~0 % (every miss compulsory); a hit rate well above zero proves the data is
    re-read, and a low one says most re-reads come back from DRAM: reuse farther apart than L2 holds."""
    hit = ctx.l2_read_hit_pct
    excess, _ = global_excess(ctx)
    if hit is None or not 10 <= hit < 60 or ctx.dram_pct < 30 or (excess or 0) >= 0.25:
        return None
    if is_matmul(ctx):
        # A hit rate is hits over all reads: it cannot tell re-reads that miss from a stream read once next
        # to a small operand re-read from L2. A tiled matmul re-reads every operand panel once per tile of
        # the other dimension by design (a GEMV: the activations, once per column block), so its partial
        # hit rate measures the tiling, not evicted data; its DRAM reads can be compulsory bytes only.
        return None
    dram_read = ctx.m("dram__bytes_read.sum")
    l2 = ctx.m("device__attribute_l2_cache_size")
    if dram_read is not None and l2 and dram_read < l2:
        return None  # the whole read traffic fits in L2: misses are compulsory
    return make(ctx, "l2-miss", 100 * 0.5 * (1 - hit / 100) * ctx.dram_pct / 100,
                {"l2_read_hit_pct": hit, "dram_throughput_pct": ctx.dram_pct, "dram_read_bytes": dram_read,
                 "l2_bytes": l2},
                "Shorten reuse distance: process the data that is re-read together (tile / block the loop, "
                "raster the grid so neighbouring blocks share inputs), or pin the hot part in L2 with an "
                "access-policy window.",
                f"data is re-read but only {hit:.0f} % of L2 reads hit: re-reads come back from DRAM")


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
    from perflab.analysis.roofline import kernel_work

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
    # the counters decide, unless they disagree with the tile in the name (a range naming another GEMM)
    best = measured if measured is not None and (waste is None or abs(measured - waste) < 0.1) else waste
    if best is None or best < 0.1:
        return None
    how = (f"{m}x{n} on {tile[0]}x{tile[1]} tiles" if tile else f"{m}x{n}") + (
        f": {100 * measured:.0f} % of the executed tensor-core work is padding" if measured is not None
        else f": {100 * waste:.0f} % of the computed tile area is padding")
    return make(ctx, "tile-quantization", 100 * best, ev,
                "Pick sizes that are multiples of the tile (pad M/N up front, batch small GEMMs together) or "
                "a kernel with a smaller tile for this shape.", how)


def class_finding(ctx: KernelContext, others: list[Finding]) -> list[Finding]:
    """memory-bound / compute-bound (by the roofline's ridge, or the roof the kernel sits at), plus
    `healthy` when the kernel is at a roof and nothing is wasted."""
    at_memory = ctx.dram_pct >= AT_ROOF_PCT
    at_compute = ctx.compute_pct >= AT_ROOF_PCT
    p = ctx.point
    ev = {"dram_throughput_pct": ctx.dram_pct, "compute_throughput_pct": ctx.compute_pct,
          "intensity_flop_per_byte": p.intensity, "ridge_flop_per_byte": p.ridge, "roof": p.roof,
          "pct_of_roof": p.pct_of_roof}
    if at_memory or at_compute:
        fid = "memory-bound" if at_memory and (not at_compute or ctx.dram_pct >= ctx.compute_pct) else "compute-bound"
        out = [make(ctx, fid, 0.0, ev, "At its roof: only less work (fewer bytes or FLOPs, lower precision, "
                    "fusion) makes it faster.", f"at the {'DRAM' if fid == 'memory-bound' else 'compute'} roof")]
        out[0].severity = "info"
        if not [f for f in others if f.severity != "info"]:
            out.append(Finding(id="healthy", severity="info", gain_pct=0.0, evidence={"kernel": ctx.k.name, **ev},
                               fix="Nothing to fix in this kernel.", summary=f"{ctx.k.name}: healthy, at its roof"))
        return out
    if others:
        return []
    if p.bound == "memory":
        return [make(ctx, "memory-bound", 100 * (1 - ctx.dram_pct / 85), ev,
                     "Move bytes faster: 16-byte vector loads, several independent loads in flight per thread, "
                     "enough blocks to fill every SM; or move fewer bytes (fuse, narrower types).",
                     f"DRAM is its limit but runs at {ctx.dram_pct:.0f} % of peak")]
    return [make(ctx, "compute-bound", 100 * (1 - ctx.compute_pct / 85), ev,
                 "Raise issue efficiency: more independent instructions per thread (ILP), cheaper math "
                 "(fast intrinsics, lower precision), tensor cores for matrix work.",
                 f"arithmetic is its limit but runs at {ctx.compute_pct:.0f} % of peak")]


def diagnose_kernel(ctx: KernelContext) -> list[Finding]:
    found = [f for f in (r(ctx) for r in RULES) if f is not None]
    return found + class_finding(ctx, found)
