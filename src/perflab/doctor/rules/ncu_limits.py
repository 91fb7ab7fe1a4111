"""What limits one kernel, the way Nsight Compute's speed-of-light analysis reasons:

1. A unit at >= 80 % of its peak is the limit: `compute-bound` / `memory-bound` naming it (info: at its
   roof, only less work helps), and `healthy` when no rule found waste. The exception is the XU pipe (the
   special-function unit, an eighth of the FMA pipe's rate): at its roof the same math can move to wider
   pipes, so it is `compute-bound` with the gain up to the next busiest resource, and never healthy.
2. When no unit is there, the rules of ncu_launch/ncu_memory/ncu_kernel say why (small grid, occupancy,
   atomics, spills, access patterns, ...). When none of them does:
   - the busiest unit at 60-80 % of peak: that unit is the limit, below its roof;
   - every unit under 60 % (ncu: "a latency issue"): the warp stalls decide. Warps waiting on memory
     while DRAM moves a real share of its bandwidth = `memory-bound` below the roof (too few bytes in
     flight: Little's law); any other stall = `latency-bound`, naming the stalls and their shares;
   - no warp-state metrics in the report: `below-roof`, with how to record a report that can say why.
A unit's percentage is always the one the finding names: no verdict calls an idle unit the limit.
"""
from __future__ import annotations

from perflab.analysis.ncu.kernel_time import Fix
from perflab.analysis.ncu.ncu_sol import MEMORY_WAITS
from perflab.doctor.rules.ncu_memory import MATH_PIPES
from perflab.doctor.finding import Finding
from perflab.doctor.rules import ncu_access, ncu_kernel, ncu_launch, ncu_memory  # noqa: F401  (they register their rules)
from perflab.doctor.rules.ncu_context import (AT_ROOF_PCT, BUSY_PCT, PRACTICAL_PCT, RECORD_FULL, RULES,
                                              ISSUE, KernelContext, make, next_busiest)

BANDWIDTH_SHARE = 20.0   # DRAM under this while warps wait on memory: the loads are latency, not bandwidth

STALL_FIX = {
    "barrier": "Fewer block-wide barriers per element: more work per thread between __syncthreads, warp "
               "shuffles instead of shared-memory steps, a single-pass algorithm (e.g. decoupled look-back for "
               "a scan) instead of barrier-separated phases.",
    "membar": "Fewer memory fences: fence once per block, not per element, or let the last block combine results.",
    "wait": "More independent instructions per thread (several accumulators, unrolled loops) so that a "
            "warp does not wait on its previous result.",
    "short_scoreboard": "Fewer dependent shared-memory or special-function round trips: keep values in "
                        "registers, batch shared loads, use intrinsics with lower latency.",
    "mio_throttle": "Fewer shared-memory instructions: wider (16-byte) shared accesses, registers for reused "
                    "values, fix bank conflicts.",
    "long_scoreboard": "Break the chain of dependent loads: several independent loads in flight per thread, "
                       "prefetch the next element before using this one, or keep the data in shared memory.",
    "lg_throttle": "Fewer, wider global memory instructions (16-byte loads), fewer local-memory accesses, "
                   "fewer atomics.",
}


def _roofline_evidence(ctx: KernelContext) -> dict:
    p = ctx.point
    return {"intensity_flop_per_byte": p.intensity, "ridge_flop_per_byte": p.ridge, "roof": p.roof,
            "pct_of_roof": p.pct_of_roof if p.bound != "unknown" else None,
            "achieved_tflops": p.flops_per_s / 1e12 if p.flops else None,
            "achieved_dram_gbps": p.dram_bytes_per_s / 1e9 if p.dram_bytes else None}


XU = "XU pipe"


def sfu_bound(ctx: KernelContext, ev: dict) -> Finding | None:
    """The special-function unit at its roof. The XU pipe (MUFU: exp2, log2, sin, cos, rsqrt, reciprocal;
    also some conversions) delivers 16 results per clock per SM on Hopper, an eighth of the FMA pipe: a
    kernel held there waits on transcendental math that fewer calls, or polynomials on the FMA pipe, would
    shorten. The gain is bounded by the next busiest resource (another pipe, a memory unit or the issue
    slots), which would set the pace once the XU work were gone."""
    xu = ctx.units.compute.get(XU)
    if xu is None or xu < AT_ROOF_PCT or xu < ctx.units.busiest_compute[1] - 1.0:
        return None
    nxt, npct = next_busiest(ctx, XU)
    issue = ctx.m(*ISSUE)
    gain = 100 * (1 - npct / xu)
    if gain < 3:
        return None  # another resource is as busy: balanced, at its roof
    xu_inst, inst = ctx.m("sm__inst_executed_pipe_xu.sum"), ctx.m("smsp__inst_executed.sum", "sm__inst_executed.sum")
    share = 100 * xu_inst / inst if xu_inst is not None and inst else None
    share_text = f" ({share:.0f} % of its instructions)" if share is not None else ""
    fma = ctx.units.compute.get("FMA pipe")
    # fewer MUFU per element: the XU work gone, its issue slots with it; the rest of the work stays
    # at best each call goes with the instruction that forms its argument (a scale, a range reduction)
    xu_issue = (share or 0.0) / 100
    fix = Fix(kept={XU: 0.0, "issue slots": 1 - xu_issue}, symptom_share=gain / 100, paced=False,
              ceiling_kept={XU: 0.0, "issue slots": max(0.0, 1 - 2 * xu_issue)},
              how="the special-function work gone (reused, or fewer calls), its issue slots with it (at best also "
                  "the instruction forming each call's argument); the kernel keeps its pace on the next busiest resource")
    return make(ctx, "compute-bound", fix,
                {"limiting_unit": XU, "limiting_unit_pct": xu, "next_unit": nxt, "next_unit_pct": npct,
                 "fma_pipe_pct": fma, "issue_slots_pct": issue, "xu_instructions": xu_inst,
                 "xu_share_of_instructions_pct": share, **ev},
                "Issue fewer special-function (MUFU) instructions per element: reuse them (exp(a+b) = exp(a) * "
                "exp(b), a recurrence along a grid, one sincos for both, a table), or evaluate part of them as "
                "polynomials on the FMA pipe (exp2 by range reduction and a short polynomial). Fast-math "
                "intrinsics (__expf, --use_fast_math) do not help here: each still costs one MUFU instruction.",
                f"the special-function unit ({XU}: exp, log, sin, rsqrt, reciprocal) runs at {xu:.0f} % of its peak"
                f"{share_text}, an eighth of the FMA pipe's rate; the next busiest, {nxt}, at {npct:.0f} %")


def at_roof(ctx: KernelContext, others: list[Finding], ev: dict) -> list[Finding]:
    sfu = sfu_bound(ctx, ev)
    if sfu is not None:
        return [sfu]
    mem, mpct = ctx.units.busiest_memory
    comp, cpct = ctx.units.busiest_compute
    dram = ctx.units.memory.get("DRAM", 0.0)
    compute = cpct >= AT_ROOF_PCT and not (dram >= AT_ROOF_PCT and dram >= cpct)
    fid, unit, pct = ("compute-bound", comp, cpct) if compute else ("memory-bound", mem, mpct)
    if not compute and dram >= AT_ROOF_PCT:
        unit, pct = "DRAM", dram
    t = ctx.traffic
    moved = (t.dram_read_bytes or 0.0) + (t.dram_write_bytes or 0.0)
    needed = ({"dram_bytes": moved, "compulsory_bytes_est": t.compulsory_bytes, "compulsory_basis": t.compulsory_basis}
              if unit == "DRAM" and t.compulsory_bytes and moved else {})
    bytes_text = (f", moving {moved / t.compulsory_bytes:.2f}x the bytes it must" if needed else "")
    f = make(ctx, fid, 0.0, {"limiting_unit": unit, "limiting_unit_pct": pct, **needed, **ev},
             "At its roof: only less work (fewer bytes or FLOPs, lower precision, fusion) makes it faster.",
             f"at the {unit} roof ({pct:.0f} % of peak){bytes_text}")
    f.severity = "info"
    out = [f]
    if not [o for o in others if o.severity != "info"]:
        out.append(Finding(id="healthy", severity="info", gain_pct=0.0,
                           evidence={"limiting_unit": unit, "limiting_unit_pct": round(pct, 1), "kernel": ctx.k.name,
                                     "kernel_time_share_pct": round(100 * ctx.share, 1),
                                     **{k: round(v, 3) if isinstance(v, float) else v for k, v in ev.items()
                                        if v is not None}},
                           fix="Nothing to fix in this kernel.",
                           summary=f"{ctx.k.name}: healthy, at its {unit} roof ({pct:.0f} % of peak)"))
    return out


TENSOR = "tensor pipe"
TENSOR_FIX = {
    "barrier": "Keep MMAs in flight. The warps that issue the tensor-core MMAs wait at barriers: on their own MMAs' "
               "completion (wgmma.wait_group; WARPGROUP.DEPBAR in SASS) or at block-wide syncs between filling a "
               "shared-memory stage and multiplying it. Issue a K-step's MMAs back to back and wait once, and let "
               "producer warps fill a ring of stages (TMA or cp.async, mbarriers between stages) while consumer "
               "warps only issue MMAs: warp specialization (Triton: tl.range(..., warp_specialize=True); CUTLASS: a "
               "warp-specialized mainloop). Nsight Compute's Source page shows on which instruction the samples wait.",
    "memory": "Keep operands in flight: a deeper ring of shared-memory stages (num_stages), asynchronous copies "
              "(cp.async, TMA) issued stages ahead of the MMAs, or producer warps that only load (warp "
              "specialization).",
}


def tensor_pipe_waits(ctx: KernelContext, top: list) -> tuple[str, dict, str] | None:
    """The busiest unit below its roof is the tensor pipe. Its work is already on tensor cores and one MMA keeps
    the pipe busy for many cycles, so issue slots are mostly idle and ILP or cheaper math cannot help: the pipe
    idles while the warps that feed it wait. Their top stall says on what. (fix, evidence, why) or None."""
    tensor = ctx.units.compute.get(TENSOR)
    issue = ctx.m(*ISSUE)
    if tensor is None or tensor < ctx.units.busiest_compute[1] - 1.0 or not top or (issue or 0.0) >= BUSY_PCT:
        return None
    reason = top[0].reason
    kind = "barrier" if reason == "barrier" else "memory" if reason in MEMORY_WAITS else None
    if kind is None:
        return None
    slots = f", issue slots {issue:.0f} % busy" if issue is not None else ""
    why = f"; the tensor pipe idles {100 - tensor:.0f} % of the time while its warps stall on {ctx.stalls.text(3)}{slots}"
    return TENSOR_FIX[kind], {"tensor_pipe_pct": tensor, "issue_slots_pct": issue}, why


def below_roof(ctx: KernelContext, ev: dict) -> Finding:
    """No rule explained why no unit is at its roof: the busiest unit, then the stalls, decide."""
    unit, busiest = ctx.units.busiest
    mem, mpct = ctx.units.busiest_memory
    st = ctx.stalls
    top = st.top(3) if st else []
    stall_text = st.text(3) if top else ""
    occ = ctx.occupancy
    ev = {**ctx.stall_evidence(), "busiest_unit": unit, "busiest_unit_pct": busiest, **ev,
          "achieved_occupancy_pct": occ.achieved_pct, "theoretical_occupancy_pct": occ.theoretical_pct,
          "occupancy_limiter": occ.achieved_limiter}
    capped = (f"; the grid fills only {occ.grid_cap_pct:.0f} % of the warp slots"
              if occ.achieved_limiter == "grid" and occ.grid_cap_pct is not None else "")
    # the fix lifts what holds the busiest unit below its roof: the top stall's share of the warps' cycles is
    # what the symptom is seen to cost
    change = Fix(symptom_share=top[0].pct / 100 if top else None,
                 how="the same work with its busiest unit at the practical pace")
    if busiest >= BUSY_PCT:
        fid = "memory-bound" if unit in ctx.units.memory else "compute-bound"
        why = f"; warps stall on {stall_text}" if top else f"; to see why, {RECORD_FULL}"
        fix = ("Move bytes faster: 16-byte vector loads, several independent loads in flight per thread, enough "
               "blocks to fill every SM; or move fewer bytes (fuse, narrower types)." if fid == "memory-bound" else
               "Raise issue efficiency: more independent instructions per thread (ILP), cheaper math (fast "
               "intrinsics, lower precision), tensor cores for matrix work.")
        fed = tensor_pipe_waits(ctx, top) if fid == "compute-bound" else None
        if fed is not None:
            fix, extra, why = fed
            ev.update(extra)
        return make(ctx, fid, change, ev, fix, f"{unit} is its busiest unit at {busiest:.0f} % of peak, below its "
                                             f"roof (~{PRACTICAL_PCT:.0f} % reachable){why}")
    if not top:
        missing = [side for side, d in (("memory", ctx.units.memory), ("compute", ctx.units.compute)) if not d]
        lacks = "warp-state" + "".join(f" or {side} throughput" for side in missing)
        return make(ctx, "below-roof", change, ev,
                    f"Find out why no unit is busy: {RECORD_FULL}, then run perflab doctor on that report.",
                    f"no measured unit is near its ceiling (busiest: {unit} at {busiest:.0f} % of peak) and this "
                    f"report has no {lacks} metrics to say why")
    # the bandwidth the work needs is DRAM's (or, where the GPU reports no DRAM counters, ncu's memory throughput)
    dram_unit, dram = ("DRAM", ctx.units.memory["DRAM"]) if "DRAM" in ctx.units.memory else (mem, mpct)
    if top[0].reason in MEMORY_WAITS and dram_unit and dram >= BANDWIDTH_SHARE:
        # its work is the bytes it moves (and its math); the loads and the instructions per byte that keep so few
        # bytes in flight (narrow loads, one at a time, staged through shared memory) are what the fix changes
        work = {u: 1.0 for u in (dram_unit, *MATH_PIPES) if u in {**ctx.units.memory, **ctx.units.compute}}
        inflight = Fix(kept=work, only=True, symptom_share=st.share(*MEMORY_WAITS) / 100,
                       how="more bytes in flight: the kernel's bytes (and its math) at the practical DRAM pace")
        return make(ctx, "memory-bound", inflight, ev,
                    "Put more bytes in flight: 16-byte vector loads, several independent loads per thread "
                    "(unroll), enough blocks to fill every SM; or move fewer bytes (fuse, narrower types).",
                    f"its work is memory traffic but {dram_unit} runs at {dram:.0f} % of peak: too few bytes in "
                    f"flight (warps stall on {stall_text}{capped})")
    return make(ctx, "latency-bound", change, ev, STALL_FIX.get(top[0].reason, "Shorten what the warps wait on: "
                                                                              "more independent work per thread."),
                f"no unit is near its ceiling (busiest: {unit} at {busiest:.0f} % of peak); warps stall on "
                f"{stall_text} ({top[0].reason}: {top[0].meaning}){capped}")


def class_finding(ctx: KernelContext, others: list[Finding]) -> list[Finding]:
    ev = {**ctx.sol_evidence(), **_roofline_evidence(ctx)}
    if not ctx.units.measured:
        if others:
            return []
        return [make(ctx, "below-roof", 0.0, ev, f"To see what limits it, {RECORD_FULL}.",
                     "the report has no throughput metrics (no speed-of-light section): nothing can be said "
                     "about what limits this kernel")]
    if ctx.busiest_pct >= AT_ROOF_PCT:
        return at_roof(ctx, others, ev)
    if others and (ctx.busiest_pct >= BUSY_PCT or any(o.id != "tail-effect" for o in others)):
        return []   # what the rules found is what holds it below its roof
    # a partial last wave explains only the SMs it leaves idle, not why the busy ones run far below every roof (a
    # latency issue): that gap is a finding of its own where it saves more (a GEMV far below DRAM with a tail)
    gap = below_roof(ctx, ev)
    return [gap] if not others or gap.gain_pct > max(o.gain_pct for o in others) else []


def diagnose_kernel(ctx: KernelContext) -> list[Finding]:
    found = [f for f in (r(ctx) for r in RULES) if f is not None]
    return found + class_finding(ctx, found)
