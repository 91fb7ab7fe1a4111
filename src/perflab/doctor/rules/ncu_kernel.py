"""Kernel-level rules over Nsight Compute metrics (taxonomy level `kernel`): instruction-level waste and the
matrix work. The access-pattern rules are in ncu_access.py, the memory-traffic rules in ncu_memory.py, the
launch rules in ncu_launch.py, what limits the kernel (a unit at its roof, or why none is) in ncu_limits.py.

Each rule reads documented ncu metrics of one kernel launch and returns at most one Finding with the
numbers it used. Its gain is what its fix would save in this kernel, from the one model of the kernel's time
(analysis/ncu/kernel_time.py): the fix changes the work of some units, and the kernel ends when its most
loaded unit is done; so a waste pattern on a unit that does not limit the kernel saves nothing, and every
rule's gain compares with every other's. A metric the report lacks makes its rule stay silent.
"""
from __future__ import annotations

import math

from perflab.analysis.ncu.kernel_time import Fix
from perflab.analysis.work.gemm_shapes import gemm_dims, gemm_tile
from perflab.analysis.work.roofline import fp32_fma_peak, kernel_work
from perflab.doctor.finding import Finding
from perflab.doctor.rules.ncu_access import reuse
from perflab.doctor.rules.ncu_context import KernelContext, kernel_rule, make

MIN_SIMT_SHARE = 10.0   # % the FMA (or FP64) pipe is busy, or FMA's share of the instructions, for matrix work
MIN_GAIN = 3.0          # % of the kernel: below this a fix saves nothing worth a finding
# the tensor path matrix work on a SIMT path moves to: (the point: same precision class, the ceiling: fastest)
TENSOR_PATHS = {"fp32": ("tf32", "bf16"), "fp64": ("fp64_tensor", "fp64_tensor")}


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
    l1 = ctx.l1_pct
    change = Fix(kept={"L1/shared": 1 - excess}, paced=False, symptom_share=excess * l1 / 100,
                 how="the replays gone: L1/shared does (1 - replays) of its work, the kernel keeps its pace")
    est = ctx.estimate(change)
    if est is None or est.gain_pct < MIN_GAIN:
        return None   # another unit is as busy as L1 would be without the replays: they cost no time
    nxt, npct = est.limit, 100 * est.limit_busy_us / est.now_us
    paced = (f"; without them {nxt}, at {npct:.0f} % of peak, would set the pace"
             if nxt and nxt != "L1/shared" and est.gain_pct < 0.8 * excess * l1 else "")
    return make(ctx, "bank-conflicts", change,
                {"excess_wavefront_pct": 100 * excess, "measured_by": how, "l1_throughput_pct": l1,
                 "shared_wavefronts": wf, "shared_wavefronts_ideal": ideal, "next_unit": nxt, "next_unit_pct": npct},
                "Pad shared arrays by one word per row (tile[32][33]) or swizzle the index so that a warp's "
                "lanes fall in different banks; for 16-byte accesses pad by 16 bytes.",
                f"{100 * excess:.0f} % of shared-memory wavefronts are bank-conflict replays{paced}")


@kernel_rule
def warp_divergence(ctx: KernelContext) -> Finding | None:
    """smsp__thread_inst_executed_per_inst_executed.ratio: active threads per executed instruction (of 32).
    The idle lanes waste the SM's issue slots and pipes; they cost time only where the SM side limits the
    kernel: a divergent kernel at its DRAM roof waits on DRAM either way. Uniform branches fill the lanes:
    the SM side does r / 32 of its warp instructions, the kernel keeps its pace."""
    r = ctx.m("smsp__thread_inst_executed_per_inst_executed.ratio")
    if r is None or r >= 24:
        return None
    waste = 1 - r / 32
    lanes = Fix(kept={u: r / 32 for u in [*ctx.units.compute, "issue slots"]}, paced=False,
                symptom_share=waste * max(ctx.compute_pct, 30) / 100,
                how="every lane busy: the SM's pipes and issue slots do threads-per-instruction / 32 of their "
                    "warp instructions; the kernel keeps its pace")
    return make(ctx, "warp-divergence", lanes,
                {"threads_per_instruction": r, "sm_throughput_pct": ctx.compute_pct,
                 "branch_instruction_pct": ctx.m("derived__smsp__inst_executed_op_branch_pct")},
                "Make the branch uniform per warp: sort or bin the work so that a warp's 32 threads take the "
                "same path, move the choice to the block or warp level, or compute both sides branch-free.",
                f"only {r:.1f} of 32 threads are active per instruction")


def is_matmul(ctx: KernelContext) -> bool:
    """Matrix work: named so, tied to a matrix op, on tensor cores, or an FMA K loop (analysis/ncu/matrix_work)."""
    return ctx.matrix is not None


def kernel_work_flops(ctx: KernelContext) -> dict[str, float]:
    return kernel_work(ctx.k).flops


@kernel_rule
def no_tensor_cores(ctx: KernelContext) -> Finding | None:
    """Matrix work (analysis/ncu/matrix_work.py) on the FMA or FP64 pipe while the tensor pipe idles. The fix runs
    the product on tensor cores (a library GEMM, or mma in the kernel): the kernel becomes its FLOPs at the
    tensor-core roof (TF32 for fp32 work, FP64 tensor cores for fp64; the ceiling: bf16 for fp32 work, its inputs
    narrowed) and its DRAM bytes (the compulsory ones where it re-reads its inputs)."""
    mw = ctx.matrix
    if mw is None or mw.pipe is None or mw.flops <= 0 or mw.gemv_like:
        return None   # a GEMV reads each input once for one FMA: DRAM, not the math pipe, sets its time
    tensor = ctx.units.compute.get("tensor pipe", ctx.m("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"))
    if (tensor or 0) >= 1 or (mw.k_depth is not None and mw.k_depth < 16):
        return None   # tensor cores already busy, or too few products per output to fill an MMA
    fma = ctx.m("sm__sass_thread_inst_executed_op_ffma_pred_on.sum")
    inst = ctx.m("smsp__inst_executed.sum")
    share = 100 * fma / 32 / inst if fma and inst else None
    if max(mw.pipe_pct or 0.0, share or 0.0) < MIN_SIMT_SHARE:
        return None
    point_path, best_path = TENSOR_PATHS[mw.path]
    roof = ctx.roofs.get(point_path) or (ctx.tensor_roof_flops if mw.path == "fp32" else None)
    if not roof:
        return None
    best = ctx.roofs.get(best_path) or roof
    r = reuse(ctx)
    keep = r["compulsory_bytes"] / r["dram_bytes"] if r and r["matrix"] else 1.0
    simt_peak = (fp32_fma_peak(ctx.k) or ctx.roofs.get("fp32")) if mw.path == "fp32" else ctx.roofs.get("fp64")
    faster = 1 - simt_peak / roof if simt_peak else 1.0
    memory = "DRAM" if "DRAM" in ctx.units.memory else "memory"   # GB10 has no dram__ counters
    change = Fix(only=True, kept={memory: keep}, added_us={"tensor pipe": mw.flops / roof * 1e6},
                 ceiling_added_us={"tensor pipe": mw.flops / best * 1e6},
                 symptom_share=(mw.pipe_pct or 0.0) / 100 * max(faster, 0.0),
                 how=f"the product on tensor cores: its FLOPs at the {point_path.upper()} roof ({roof / 1e12:,.0f} "
                     f"TFLOP/s; the ceiling at {best_path.upper()}, {best / 1e12:,.0f}) and its DRAM bytes"
                     + (" down to the compulsory ones" if keep < 1 else "") + ", at the practical pace")
    achieved = mw.flops / ctx.k.duration_s if ctx.k.duration_s else 0.0
    found = make(ctx, "no-tensor-cores", change,
                 {"fp32_tflops" if mw.path == "fp32" else "fp64_tflops": achieved / 1e12,
                  "simt_pipe": mw.pipe, "simt_pipe_pct": mw.pipe_pct, "ffma_share_of_instructions_pct": share,
                  "tensor_pipe_pct": tensor, "tensor_roof_tflops": roof / 1e12, "name_says_matmul": "name" in mw.why,
                  **mw.evidence()},
                 "Run the matrix product on tensor cores: torch.matmul with TF32 allowed "
                 "(torch.backends.cuda.matmul.allow_tf32 = True, or torch.set_float32_matmul_precision('high')) or "
                 "bf16/fp16 inputs, cuBLAS/CUTLASS, Triton's tl.dot without input_precision='ieee', or mma/wgmma in a "
                 "custom kernel" + ("; FP64: cuBLAS DGEMM uses the FP64 tensor cores." if mw.path == "fp64" else "."),
                 f"matrix work ({', '.join(mw.why)}) on the {mw.pipe} at {achieved / 1e12:.1f} TFLOP/s "
                 f"({mw.pipe_pct or 0:.0f} % busy) with the tensor pipe idle; on tensor cores its "
                 f"{mw.flops / 1e9:,.1f} GFLOP take {mw.flops / roof * 1e6:,.0f} us at the roof")
    return found if found.evidence["kernel_gain_pct"] >= MIN_GAIN else None


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
    every = [*ctx.units.memory, *ctx.units.compute, "issue slots"]
    change = Fix(kept={u: 1 - best for u in every}, paced=False, symptom_share=best,
                 how="the padding's work gone at every unit; the kernel keeps its pace")
    return make(ctx, "tile-quantization", change, ev,
                "Pick sizes that are multiples of the tile (pad M/N up front, batch small GEMMs together) or "
                "a kernel with a smaller tile for this shape.", how)
