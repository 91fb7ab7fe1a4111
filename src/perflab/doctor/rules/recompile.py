"""recompilation: torch.compile compiles again inside most steps (analysis/steps/compile_work.py: `recurring`).

Compile work in the first steps is the one-time cost it is (doctor/steady_state.py says so and how to record after
it). Compile work that comes back in most steps, the later ones included, is the program's steady state: a guard
fails every call (a new sequence length with dynamic shapes off, a Python scalar that changes, a new dict key), so
Dynamo and Inductor run again and again. The gain is the compile time in the steps. The evidence: the steps that
hold compile work, Dynamo's compile ids (frame/recompile: `0/7` is frame 0's eighth compile), the phases, and the
ops whose input shapes change from step to step (what the guards most likely failed on). The trace does not hold
Dynamo's own recompile reasons: `TORCH_LOGS=recompiles` prints them.
"""
from __future__ import annotations

import numpy as np

from perflab.doctor.context import Context
from perflab.doctor.finding import Finding
from perflab.doctor.registry import rule, significant
from perflab.trace.model import CPU_OP, KERNEL


def changing_shapes(ctx: Context, top: int = 3) -> list[dict]:
    """Ops inside the steps whose recorded input shapes differ from step to step (the most distinct first)."""
    from perflab.analysis.work.kernel_patterns import _op_of_kernel

    trace, windows = ctx.trace, ctx.windows
    # the ops that ran on the GPU (launched kernels), not those Dynamo and Inductor run on fake tensors while
    # compiling
    launched = _op_of_kernel(trace, np.flatnonzero(trace.kind == KERNEL))
    ops = np.unique(launched[launched >= 0])
    ops = ops[(trace.kind[ops] == CPU_OP) & (trace.shape[ops] >= 0)]
    ops = ops[windows.index_of(trace.ts[ops]) >= 0]
    if not ops.size:
        return []
    out = []
    for name in np.unique(trace.name[ops]).tolist():
        mine = ops[trace.name[ops] == name]
        shapes = list(dict.fromkeys(trace.shapes[i] for i in trace.shape[mine].tolist()))
        if len(shapes) >= 3:
            out.append({"op": trace.names[name], "distinct_shapes": len(shapes), "calls": int(mine.size),
                        "examples": [s[:120] for s in shapes[:3]]})
    out.sort(key=lambda d: (-d["distinct_shapes"], -d["calls"]))
    return out[:top]


def compiled_code_step_us(ctx: Context) -> float:
    """Per step, what the program costs once it stops compiling: the GPU time of the kernels launched outside
    compile work (the compiled code's kernels and the eager ops around it; not autotuning's benchmark runs), or
    the host's launch calls for them, whichever is longer. 0 where the trace holds none."""
    from perflab.analysis.idle.intervals import containing, merge
    from perflab.analysis.steps.compile_work import compile_work_rows
    from perflab.analysis.steps.links import launch_calls_us, launch_of

    t = ctx.trace
    rows = ctx.window_gpu
    links = launch_of(t)[rows]
    compile_rows = compile_work_rows(t)
    starts, ends = merge(t.ts[compile_rows], t.end[compile_rows])
    at = np.where(links >= 0, t.ts[np.maximum(links, 0)], t.ts[rows])
    steady = containing(starts, ends, at) < 0
    gpu = float(t.dur[rows[steady]].sum())
    return max(gpu, launch_calls_us(t, rows[steady])) / ctx.n_steps


@rule
def recompilation(ctx: Context) -> list[Finding]:
    from perflab.analysis.steps.compile_work import compile_work

    work = compile_work(ctx.trace, ctx.windows)
    if not work.get("recurring"):
        return []
    shapes = changing_shapes(ctx)
    ids = work["compile_ids"]
    recompiles = [i for i in ids if not i.endswith("/0")]
    per_step_ms = work["compile_us"] / ctx.n_steps / 1e3
    gain = ctx.share(work["compile_us"])
    summary = (f"torch.compile compiles again in {work['steps_with_compile']} of {work['steps']} steps "
               f"({per_step_ms:,.1f} ms of compile work per step, {work['share_pct']:.0f}% of the window)"
               + (f"; Dynamo's compile ids reach {ids[-1]} ({len(recompiles)} recompiles seen)" if ids else "")
               + (f"; {shapes[0]['op']} runs with {shapes[0]['distinct_shapes']} different input shapes" if shapes else "")
               + ": compilation is the program's steady state, not a one-time cost.")
    return significant(
        "recompilation", gain, summary,
        {"steps_with_compile": work["steps_with_compile"], "steps": work["steps"],
         "compile_ms_per_step": per_step_ms, "compile_share_pct": work["share_pct"], "compile_ids": ids[:12],
         "recompiles_seen": len(recompiles), "phases": work["names"], "changing_shapes": shapes,
         # compile time gone is the least the fix gives; the steps' own time left is read under the profiler's
         # weight and Dynamo's guards, which compiled code no longer re-checking sheds too
         "speedup_at_least": round(1 / max(1 - gain / 100, 1e-6), 2), **_at_most(ctx, gain, work["steps_with_compile"] >= work["steps"]),
         "reasons": "not in the trace: run with TORCH_LOGS=recompiles to print the failing guards"},
        "Stop the recompiles: TORCH_LOGS=recompiles names the guard that fails; mark the changing dimension "
        "dynamic (torch._dynamo.mark_dynamic(x, dim) or torch.compile(dynamic=True)), pad inputs to a few bucket "
        "sizes, or pass a changing Python scalar as a tensor. Raising the recompile limit only hides it.")


def _at_most(ctx: Context, gain: float, every_step: bool) -> dict:
    """The ceiling: the step shrunk to what its steady-state code costs (compiled_code_step_us). The point: where
    every step compiles, no call of the compiled code ran without compiling, so the host's share of a steady step
    (guards, the wrapper, the launches) cannot be read; it lies between the two, and the point is their geometric
    midpoint (`speedup_est_from`)."""
    left = compiled_code_step_us(ctx)
    step = ctx.window_us / ctx.n_steps
    if left <= 0 or step <= left:
        return {}
    floor = 1 / max(1 - gain / 100, 1e-6)
    most = max(step / left, floor)
    out = {"speedup_at_most": round(most, 2), "step_ms_at_best": round(left / 1e3, 4)}
    if not every_step:
        return out
    return {**out, "speedup_est": round((floor * most) ** 0.5, 2),
            "speedup_est_from": "the geometric midpoint of the floor (compile work gone) and the ceiling (the "
                                "compiled code's own GPU time or launch calls): no step ran the compiled code "
                                "without compiling, so its steady host cost is not in the trace"}
