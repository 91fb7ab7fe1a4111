"""`allocator-churn`: device memory allocated and freed inside the steps, stalling the host or the device.

The evidence is the allocator calls themselves (analysis.gpu_memory.allocator: cudaMalloc, cudaFree, their async,
driver, ROCm and virtual-memory kin, by name, so Nsight Systems data reads the same) and the GPU idle
time spent while the launching thread was inside them (analysis.idle.gaps cause `alloc`): that idle time is
the gain. Calls that the GPU never waits for (the host far ahead) cost nothing and give no finding.
"""
from __future__ import annotations

from perflab.analysis.gpu_memory.allocator import allocator_calls
from perflab.doctor.context import Context
from perflab.doctor.finding import Finding
from perflab.doctor.registry import rule
from perflab.doctor.registry import significant as _finding


@rule
def allocator_churn(ctx: Context) -> list[Finding]:
    """Range: the floor has the host's allocator calls and the GPU idle they left gone (the caching allocator serves
    the same requests from its cache, fix_bounds.host_time_removed); the ceiling, the step no shorter than the GPU's
    work or the host's launch calls (fix_bounds.wait_removed)."""
    from perflab.doctor.fix_bounds import host_time_removed, wait_removed

    calls = allocator_calls(ctx.trace, ctx.windows)
    if not calls["count"]:
        return []
    from perflab.analysis.idle.host import first_call_outlier

    from perflab.doctor.rules.cuda_fixes import fix as in_terms
    from perflab.doctor.rules.system import _rate

    gain = ctx.gaps.pct("alloc")
    steps = ctx.n_steps
    n_steps = len(ctx.windows.steps)
    per = "per step" if n_steps else "in the analysed span"
    names = ", ".join(f"{n} x{c}" for n, c in list(calls["names"].items())[:3])
    first = calls["inside_first_call"]
    warmup = first_call_outlier(ctx.trace, first["op"]) if first.get("pct", 0) >= 50 else None
    note, fix_first = "", ""
    if warmup:
        note = (f" {first['pct']:.0f}% of that time is inside the first call of {first['op']} ({warmup['first_ms']:,.0f} ms; "
                f"its other {warmup['calls'] - 1} calls take {warmup['median_ms']:.2f} ms): warm-up inside the profiled window.")
        fix_first = ("First profile the steady state: run a few steps before profiling (torch.profiler.schedule with "
                     "warmup), then read the trace again. ")
    return _finding(
        "allocator-churn", gain,
        f"The host calls the device allocator {_rate(calls['count'], n_steps)} ({names}), "
        f"{calls['host_us'] / steps / 1e3:,.2f} ms {per} ({calls['host_pct']:.0f}% of step time); the GPU waits "
        f"meanwhile{' (a free first drains it)' if calls['frees'] else ''}: ~{gain:.0f}% of step time.{note}"
        + ("" if n_steps else " Without steps this may be one-time set-up: profile the steady state to tell."),
        {"gpu_idle_pct": 100.0 - ctx.gpu_busy_pct, "step_time_ms": ctx.step_ms, "steps": len(ctx.windows.steps),
         "allocator_calls_per_step": calls["count"] / steps, "frees_per_step": calls["frees"] / steps,
         "allocs_per_step": calls["allocs"] / steps, "allocator_ms_per_step": calls["host_us"] / steps / 1e3,
         "allocator_time_pct": calls["host_pct"], "allocator_idle_pct": gain, "allocator_calls": calls["names"],
         **({"warmup_in_window": warmup} if warmup else {}),
         **host_time_removed(ctx, gain, calls["host_us"] / steps), **wait_removed(ctx, gain)},
        fix_first + in_terms(ctx, "allocator-churn",
        "Let the caching allocator keep its memory between steps: take torch.cuda.empty_cache() (and gc.collect() "
        "that frees CUDA tensors) out of the loop; allocate buffers once and reuse them (preallocated outputs, out=); "
        "with shapes that change every step, pad to a few sizes or set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; "
        "if memory runs short and the allocator frees its cache to retry, lower the peak instead."),
        [ctx.event(r) for r in calls["longest_rows"]],
    )
