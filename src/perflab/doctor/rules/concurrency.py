"""serialized-kernels: independent kernels that each fill a fraction of the GPU run one after another.

The gain is the SM-time the under-filled kernels leave idle while they run alone (analysis.idle.concurrency):
if they shared the GPU (streams) or were one launch (batching), that time could shrink towards the
work their blocks really do. Only kernels of at least MIN_KERNEL_US count: many tiny kernels are a
launch-overhead problem, which side streams do not solve.
"""
from __future__ import annotations

from perflab.analysis.idle.concurrency import UNDERFILL, kernel_concurrency
from perflab.doctor.context import Context
from perflab.doctor.finding import Finding
from perflab.doctor.fix_bounds import packing_at_most
from perflab.doctor.registry import rule
from perflab.doctor.registry import significant as _finding


@rule
def serialized_kernels(ctx: Context) -> list[Finding]:
    c = ctx.trace.cached(("kernel_concurrency", ctx.windows.key), lambda: kernel_concurrency(ctx.trace, ctx.windows))
    u = c["underfilled"]
    if not u["count"] or not c["sms"]:
        return []
    gain = ctx.share(u["idle_sm_us"])
    grids = u["grids"]
    blocks = f"{grids[0]}" if len(grids) == 1 else f"{grids[0]}-{grids[-1]}"
    busiest = c["streams"][0] if c["streams"] else {"stream": -1, "busy_pct": 0.0}
    return _finding(
        "serialized-kernels", gain,
        f"{u['count'] / ctx.n_steps:.0f} kernels per step launch {blocks} thread blocks for {c['sms']} SMs and run "
        f"one at a time ({c['concurrent_pct']:.0f}% of kernel time has two or more kernels running): "
        f"~{gain:.0f}% of step time leaves SMs idle that independent work could use.",
        {"underfilled_kernels_per_step": u["count"] / ctx.n_steps, "underfilled_time_pct": ctx.share(u["time_us"]),
         "alone_time_pct": ctx.share(u["alone_us"]), "blocks": grids, "sms": c["sms"],
         "fill_pct": c["fill_pct"], "concurrent_pct": c["concurrent_pct"], "max_concurrent": c["max_concurrent"],
         "streams": len(c["streams"]), "busiest_stream": busiest["stream"],
         "busiest_stream_busy_pct": busiest["busy_pct"], "kernels": u["names"],
         "underfill_threshold_pct": 100.0 * UNDERFILL, **packing_at_most(gain)},
        "If the kernels are independent (per expert, per head, per request), let them share the GPU: issue them "
        "on several CUDA streams (torch.cuda.Stream; wait_stream / events for the inputs they need and before "
        "the results are read), or batch them into one launch (torch.bmm, a grouped GEMM, one kernel with an "
        "extra grid dimension). Otherwise give each kernel more blocks (smaller tiles, split-K).",
        [ctx.event(r) for r in u.get("rows", [])],
    )
