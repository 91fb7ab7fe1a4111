"""Kernel-level findings a trace alone can show (kernel names and launch shapes, no counters).

Gains are shares of step time, so on a mostly idle GPU they stay small: the coarse levels come first.
These rules judge by kernel names and times; where the op work model prices most of the GPU time (shapes
recorded, rules/roof.py) they defer to its speed-of-light findings.
"""
from __future__ import annotations

import numpy as np

from perflab.analysis.work.estimate import speedup_of_gain
from perflab.analysis.work.kernels import is_simt_gemm, window_gpu_rows
from perflab.doctor.context import Context
from perflab.doctor.finding import Finding
from perflab.doctor.fix_bounds import saved_at_most
from perflab.doctor.on_path import critical_saving
from perflab.doctor.registry import rule
from perflab.doctor.registry import significant as _finding
from perflab.doctor.rules.roof import covers
from perflab.doctor.tensor_core_fix import tensor_core_fix
from perflab.trace.model import KERNEL

# Tensor cores run FP32-input GEMMs (TF32/BF16) several times faster than the SIMT path; assume
# the SIMT kernels' time shrinks by at least this fraction.
TENSOR_CORE_SAVING = 0.75


def _gemm_us(ctx: Context) -> float:
    return sum(ctx.kernels["by_type"].get(k, {}).get("total_us", 0.0) for k in ("gemm", "conv"))


@rule
def no_tensor_cores(ctx: Context) -> list[Finding]:
    if covers(ctx):
        return []
    t = ctx.trace
    rows = window_gpu_rows(t, ctx.windows)
    rows = rows[t.kind[rows] == KERNEL]
    simt = rows[t.name_table_mask(is_simt_gemm)[rows]]
    fix = tensor_core_fix(t)  # for what the GPU in the trace has; None: it has no tensor cores
    if simt.size == 0 or fix is None:
        return []
    simt_us = float(t.dur[simt].sum())
    gemm_us = _gemm_us(ctx)
    saved, on_path = critical_saving(ctx, simt, TENSOR_CORE_SAVING * simt_us)
    gain = ctx.share(saved)
    per_name = np.bincount(t.name[simt], weights=t.dur[simt])
    names = [t.names[i] for i in np.argsort(-per_name) if per_name[i] > 0]
    top = simt[np.argsort(-t.dur[simt])[:5]]
    return _finding(
        "no-tensor-cores", gain,
        f"Matrix math runs on the FP32 SIMT path ({names[0][:60]}...): {ctx.share(simt_us):.0f}% of step time "
        "in GEMMs that do not use tensor cores.",
        {"simt_gemm_time_pct": ctx.share(simt_us), "simt_share_of_gemm_pct": 100.0 * simt_us / gemm_us if gemm_us else 100.0,
         "simt_kernels": names[:5], "count": int(simt.size), **on_path},
        fix, [ctx.event(r) for r in top.tolist()],
    )


@rule
def unfused_elementwise(ctx: Context) -> list[Finding]:
    if covers(ctx):
        return []
    chains = ctx.chains
    if chains["chain_count"] == 0:
        return []
    saved, on_path = critical_saving(ctx, np.concatenate(chains["chains"]), chains["saving_us"])
    gain = ctx.share(saved)
    longest = max(chains["chains"], key=lambda c: c.size)
    return _finding(
        "unfused-elementwise", gain,
        f"{chains['chain_count'] / ctx.n_steps:.0f} chains per step of {chains['mean_length']:.1f} elementwise "
        f"kernels on the same shape each re-read and re-write the tensor; fusing them saves ~{gain:.0f}% of step time.",
        {"chains_per_step": chains["chain_count"] / ctx.n_steps, "mean_chain_length": chains["mean_length"],
         "chained_kernel_time_pct": ctx.share(chains["time_us"]), "kernels_in_chains": chains["kernels"], **on_path},
        "Fuse the elementwise chain: torch.compile, a fused op (e.g. F.gelu(x + b) via a fused kernel), or a "
        "custom Triton kernel; avoid materializing intermediates.",
        [ctx.event(r) for r in longest[:6].tolist()],
    )


@rule
def dequant_overhead(ctx: Context) -> list[Finding]:
    """Range: the floor is the gain, the dequantize kernels gone with each GEMM no slower (it reads fewer bytes for
    the same FLOPs); the ceiling, the step no shorter than the compute kernels that are neither a dequantize pass nor
    a GEMM (fix_bounds.saved_at_most: without shapes, the GEMMs' time at the narrow width is unknown, so all of it
    may go)."""
    if covers(ctx):
        return []
    deq = ctx.dequant
    if deq["pairs"] < 2:
        return []
    saved, on_path = critical_saving(ctx, deq["rows"], deq["time_us"])
    gain = ctx.share(saved)
    return _finding(
        "dequant-overhead", gain,
        f"{deq['pairs'] / ctx.n_steps:.0f} separate dequantize/convert kernels per step run right before a GEMM "
        f"({ctx.share(deq['time_us']):.0f}% of step time): the weights are widened in memory before every matmul.",
        {"dequant_kernels_per_step": deq["pairs"] / ctx.n_steps, "gemms_per_step": deq["gemms"] / ctx.n_steps,
         "dequant_time_pct": ctx.share(deq["time_us"]), "dequant_kernels": deq["names"], **on_path,
         "speedup_at_least": round(speedup_of_gain(gain), 2),
         **saved_at_most(ctx, (deq["time_us"] + _gemm_us(ctx)) / ctx.n_steps)},
        "Use a fused low-bit GEMM that dequantizes in registers (torchao int8/int4 weight-only kernels with "
        "torch.compile, gemlite, Marlin/Machete), or keep the weights in the compute dtype if memory allows.",
        [ctx.event(r) for r in deq["rows"][:5].tolist()],
    )
