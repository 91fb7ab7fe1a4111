"""Kernel rules on the launch (analysis/ncu/ncu_sol.py): a grid too small to fill the GPU (small-grid), a
last wave that leaves SMs idle (tail-effect), too few warps resident and what limits them (low-occupancy).
They speak only when no unit is busy: a kernel at a roof lost little to its launch. What each fix would save
comes from the one model of the kernel's time (analysis/ncu/kernel_time.py): the work stays, the SMs or warps
the launch left idle get it, and the kernel's busiest unit sets the pace."""
from __future__ import annotations

import math

from perflab.analysis.ncu.kernel_time import Fix
from perflab.analysis.ncu.ncu_sol import MEMORY_WAITS
from perflab.doctor.finding import Finding
from perflab.doctor.rules.ncu_context import AT_ROOF_PCT, BUSY_PCT, KernelContext, kernel_rule, make
from perflab.doctor.rules.ncu_kernel import is_matmul

ASYNC_COPIES = ("smsp__inst_executed_op_ldgsts.sum", "smsp__inst_executed_op_tma_ld.sum")   # cp.async, TMA loads

FEW_WAVES = 0.4   # a grid that fills under 40 % of the GPU's block slots at once: far too small
OCCUPANCY_TARGET = 50.0   # % of warp slots a fix of low occupancy aims at: enough warps to hide memory latency


def grid_too_small(ctx: KernelContext) -> bool:
    """Blocks < SMs (some SMs get nothing), or so few blocks per SM that the grid, not the kernel, caps
    the warps resident, while every unit's throughput stays low."""
    shape, busiest = ctx.launch, ctx.busiest_pct
    if not shape.grid_blocks or not shape.sms or not ctx.units.measured:
        return False
    if shape.grid_blocks < shape.sms:
        return busiest < BUSY_PCT
    return shape.waves_per_sm is not None and shape.waves_per_sm < FEW_WAVES and busiest < 40


def _occupancy_evidence(ctx: KernelContext) -> dict:
    occ = ctx.occupancy
    return {"achieved_occupancy_pct": occ.achieved_pct, "theoretical_occupancy_pct": occ.theoretical_pct,
            "occupancy_limiter": occ.achieved_limiter, "theoretical_limiter": occ.theoretical_limiter,
            "grid_occupancy_cap_pct": occ.grid_cap_pct}


@kernel_rule
def small_grid(ctx: KernelContext) -> Finding | None:
    if not grid_too_small(ctx):
        return None
    shape = ctx.launch
    unit, busiest = ctx.units.busiest
    if shape.grid_blocks < shape.sms:
        what = f"{shape.grid_blocks} blocks for {shape.sms} SMs: {shape.idle_sm_pct:.0f} % of the SMs get no block"
    else:
        what = (f"{shape.grid_blocks} blocks fill {100 * shape.waves_per_sm:.0f} % of the {shape.sms} SMs' block "
                f"slots ({shape.blocks_per_sm} per SM)")
    occ = ctx.occupancy
    occ_text = (f"; {occ.achieved_pct:.0f} % of warp slots occupied where {occ.theoretical_pct:.0f} % could be"
                if occ.achieved_pct is not None and occ.theoretical_pct else "")
    idle = (shape.idle_sm_pct or 0.0) / 100 if shape.grid_blocks < shape.sms else 1 - (shape.waves_per_sm or 0.0)
    fix = Fix(symptom_share=idle, how="the same work spread over every SM: its busiest unit at the practical pace")
    return make(ctx, "small-grid", fix,
                {"grid_blocks": shape.grid_blocks, "sms": shape.sms, "idle_sm_pct": shape.idle_sm_pct,
                 "waves_per_sm": shape.waves_per_sm, "blocks_per_sm_limit": shape.blocks_per_sm,
                 "block_threads": shape.block_threads, **_occupancy_evidence(ctx),
                 "busiest_unit": unit, "busiest_unit_pct": busiest},
                "Launch several blocks per SM: split the work finer (smaller tiles, split-K for a GEMV or a GEMM "
                "with few output tiles, fewer elements per block), or batch small launches into one; if the "
                "problem itself is this small, fuse it with its neighbours or run it beside other work on "
                "another stream.",
                f"{what}{occ_text}; every unit under {max(busiest, 1):.0f} % of peak")


@kernel_rule
def tail_effect(ctx: KernelContext) -> Finding | None:
    """launch__waves_per_multiprocessor just above an integer: the last wave runs on few SMs."""
    shape = ctx.launch
    waves = shape.waves_per_sm
    if waves is None or waves <= 1:
        return None  # under one wave there is no tail: too few blocks is small-grid
    full = math.ceil(waves - 1e-9)
    idle = 1 - waves / full
    busiest = ctx.busiest_pct
    if idle < 0.1 or full > 16 or busiest >= AT_ROOF_PCT:
        return None  # a kernel at a roof over its whole duration lost little to its last wave
    dur = ctx.duration_us or 0.0
    # in its full waves the kernel runs its busiest unit at busiest / (1 - idle): what the floor can count on
    fix = Fix(not_below_us=dur * (1 - idle), symptom_share=min(idle, 1 - busiest / 100),
              floor_pace=min(1.0, busiest / 100 / (1 - idle)),
              how="the last wave's idle SM time gone (at most that), the work at its busiest unit's practical pace")
    return make(ctx, "tail-effect", fix,
                {"waves_per_sm": waves, "grid_blocks": shape.grid_blocks, "sms": shape.sms,
                 "blocks_per_sm_limit": shape.blocks_per_sm, "idle_sm_time_pct": 100 * idle,
                 "sm_throughput_pct": ctx.compute_pct},
                "Size the grid to whole waves: a persistent grid (SMs x blocks per SM) looping over the work, "
                "more and smaller blocks, or split the last wave's work across all SMs.",
                f"{waves:.2f} waves: the last wave leaves {100 * idle:.0f} % of SM time idle")


LIMITER_FIX = {
    "registers": "fewer live registers per thread (__launch_bounds__, smaller per-thread tiles)",
    "shared memory": "less shared memory per block (smaller tiles, or more work per block in the same tile)",
    "block size": "larger blocks (at least 128 threads: an SM holds a limited number of blocks)",
    "barriers": "fewer named barriers per block",
    "grid": "more blocks (several per SM)",
    "uneven work": "even work per block (the launch allows more warps than stay resident: blocks end at "
                   "different times)",
}


@kernel_rule
def low_occupancy(ctx: KernelContext) -> Finding | None:
    """sm__warps_active low while no unit is near its peak: too few warps to hide latency. What limits
    it: the launch limits (launch__occupancy_limit_*) set the theoretical occupancy; the grid, or work that
    ends unevenly, can keep the achieved one below that."""
    occ = ctx.occupancy
    busiest = ctx.busiest_pct
    if occ.achieved_pct is None or occ.achieved_pct >= 25 or busiest >= BUSY_PCT or grid_too_small(ctx):
        return None
    copies = synchronous_operand_loads(ctx)
    if copies is not None:
        return unpipelined_operand_loads(ctx, copies)
    why = occ.achieved_limiter or occ.theoretical_limiter or "unknown"
    theo = f", theoretical {occ.theoretical_pct:.0f} %" if occ.theoretical_pct is not None else ""
    fix = (f"Raise resident warps: {LIMITER_FIX.get(why, 'more resident warps')}; or more independent work per "
           "thread (unrolled loads) to keep more bytes in flight with the warps there are.")
    # Little's law: the bytes and instructions in flight grow with the warps resident, up to the unit's roof
    target = max(OCCUPANCY_TARGET, occ.achieved_pct)
    change = Fix(not_below_us=(ctx.duration_us or 0.0) * occ.achieved_pct / target,
                 symptom_share=(1 - busiest / AT_ROOF_PCT) * (1 - occ.achieved_pct / OCCUPANCY_TARGET),
                 how=f"{target:.0f} % of warp slots resident: as much more in flight, up to the busiest unit's "
                     "practical pace")
    return make(ctx, "low-occupancy", change,
                {**_occupancy_evidence(ctx), "limited_by": occ.limit_metric,
                 "blocks_per_sm_limit": ctx.launch.blocks_per_sm, "registers_per_thread": ctx.k.registers,
                 "shared_mem_per_block_bytes": ctx.k.shared_mem_bytes, "block": ctx.k.block,
                 "grid_blocks": ctx.launch.grid_blocks, "busiest_unit_pct": busiest, **ctx.stall_evidence()},
                fix,
                f"{occ.achieved_pct:.1f} % of warp slots occupied{theo} (limited by {why}), every unit under "
                f"{max(busiest, 1):.0f} %")


def unpipelined_operand_loads(ctx: KernelContext, copies: float) -> Finding:
    """A tensor-core GEMM at low occupancy whose warps wait on operands loaded synchronously. Its occupancy is
    the design (big register tiles, one or two blocks per SM), not the cause: such a GEMM hides memory latency
    with copies in flight while its MMAs run, and with no asynchronous copy nothing is in flight, so each tile's
    load latency lands on the tensor cores. `latency-bound` (no unit near its ceiling, warps stall on memory
    latency), with the pipelining fix; more warps would need fewer registers, i.e. smaller tiles."""
    occ, st = ctx.occupancy, ctx.stalls
    unit, busiest = ctx.units.busiest
    top = st.top(3)
    stall_text = st.text(3)
    blocks = ctx.launch.blocks_per_sm
    per_sm = f"{blocks} block{'s' if blocks != 1 else ''} per SM, " if blocks else ""
    why = occ.achieved_limiter or occ.theoretical_limiter or "unknown"
    return make(ctx, "latency-bound", _operands_in_flight(ctx),
                {"async_copy_instructions": copies, **ctx.stall_evidence(), "busiest_unit": unit,
                 "busiest_unit_pct": busiest, "tensor_pipe_pct": ctx.units.compute.get("tensor pipe"),
                 **_occupancy_evidence(ctx), "limited_by": occ.limit_metric, "blocks_per_sm_limit": blocks,
                 "registers_per_thread": ctx.k.registers, "shared_mem_per_block_bytes": ctx.k.shared_mem_bytes,
                 "block": ctx.k.block, "grid_blocks": ctx.launch.grid_blocks},
                "Overlap the operand loads with the MMAs: stage the next K-tiles in shared memory with asynchronous "
                "copies (cp.async or TMA) two to four stages deep (Triton num_stages >= 3, a CUTLASS multistage "
                "mainloop). Keep the occupancy: a tensor-core GEMM keeps its tensor cores busy at one block per "
                "SM once its warps no longer wait for each tile, and more warps would cost the registers that "
                "hold its tile.",
                f"warps stall on {stall_text} ({top[0].reason}: {top[0].meaning}) waiting for matrix operands "
                f"that arrive by synchronous loads (no cp.async, no TMA instruction): nothing is in flight while "
                f"the MMAs run; no unit is near its ceiling (busiest: {unit} at {busiest:.0f} % of peak); "
                f"{occ.achieved_pct:.1f} % of warp slots occupied ({per_sm}limited by {why}) is what a "
                f"register-tiled tensor-core GEMM runs at, not the cause")


def _operands_in_flight(ctx: KernelContext) -> Fix:
    """Operands copied asynchronously: the tensor pipe no longer waits on them, and each operand crosses L1 once
    (global -> shared), not twice (a load into registers, then a shared-memory store from them)."""
    sts = ctx.m("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum")
    shared = ctx.m("l1tex__data_pipe_lsu_wavefronts_mem_shared.sum")
    glob = sum(v or 0.0 for v in (ctx.m("l1tex__t_output_wavefronts_pipe_lsu_mem_global_op_ld.sum"),
                                   ctx.m("l1tex__t_output_wavefronts_pipe_lsu_mem_global_op_st.sum")))
    kept = {"L1/shared": 1 - sts / (shared + glob)} if sts is not None and shared else {}
    st = ctx.stalls
    waits = st.share(*MEMORY_WAITS) / 100 if st else None
    return Fix(kept=kept, symptom_share=waits,
               how="operands in flight while the MMAs run: the shared-memory stores of the register staging gone, "
                   "the busiest unit at the practical pace")


def synchronous_operand_loads(ctx: KernelContext) -> float | None:
    """0 for a matmul whose warps mostly wait on global loads and that issues no asynchronous copy (cp.async
    or TMA) to hide them behind its MMAs; None otherwise, or where the report cannot tell."""
    counts = [ctx.m(m) for m in ASYNC_COPIES]
    st = ctx.stalls
    top = st.top(1) if st else []
    if any(c is None for c in counts) or sum(counts) > 0 or not top or top[0].reason not in MEMORY_WAITS:
        return None
    return 0.0 if is_matmul(ctx) else None
