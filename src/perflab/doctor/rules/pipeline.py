"""pipeline-bubble: pipeline-parallel stages idle waiting for the previous (or next) stage.

Read from P2P-bracketed compute (analysis/multigpu/pipeline.py) on every loaded rank: each stage's idle share of
its step, where it sits, and the micro-batches seen per step, against the GPipe/1F1B bubble
(p-1)/(m+p-1) for the stages and micro-batches. DDP and tensor-parallel jobs have no send/recv between
compute blocks, so the rule stays silent on them.
"""
from __future__ import annotations

from perflab.doctor.context import Context
from perflab.doctor.finding import Finding
from perflab.doctor.registry import rule
from perflab.doctor.registry import significant as _finding


def stage_of(trace, windows) -> dict | None:
    """analysis.multigpu.pipeline.rank_pipeline of `trace` in `windows` (its analysis windows), kept with the trace: a
    rank summary (multirank/summary.py) carries it, as the merge runs this rule over every rank."""
    from perflab.analysis.multigpu.pipeline import rank_pipeline

    return trace.cached(f"pipeline_stage:{windows.key}", lambda: rank_pipeline(trace, windows))


def _stages(ctx: Context) -> list[dict]:
    stages = (stage_of(t, ctx.rank_windows(t)) for t in ctx.ranks)
    return [s for s in stages if s is not None]


@rule
def pipeline_bubble(ctx: Context) -> list[Finding]:
    from perflab.analysis.multigpu.pipeline import gpipe_bubble_pct

    stages = _stages(ctx)
    mine = next((s for s in stages if s["rank"] == ctx.trace.rank), None)
    if mine is None:
        return []
    p = len(stages) if len(stages) > 1 else int(ctx.trace.meta.get("world_size") or 1)
    m = mine["micro_batches"]
    expected = gpipe_bubble_pct(p, m)
    idle = mine["bubble_pct"]
    # More micro-batches can win back at most the schedule's own bubble; idle beyond it is this stage waiting
    # on a slower stage (or on the transfers), which more micro-batches do not remove.
    gain = min(idle, expected)
    slower = max((s for s in stages if s["rank"] != mine["rank"]), key=lambda s: s["compute_ms"], default=None)
    out = _finding(
        "pipeline-bubble", gain,
        f"Pipeline stage (rank {mine['rank']}) idles {mine['bubble_ms_per_step']:.2f} ms per step "
        f"({idle:.0f}%: {mine['start_idle_pct']:.0f}% before its first micro-batch, {mine['end_idle_pct']:.0f}% after "
        f"its last) waiting on the other stages: {m:g} micro-batch(es) per step across {p} stages, where a "
        f"GPipe/1F1B schedule idles {expected:.0f}% of each stage (the share more micro-batches can win back).",
        {"stages": p, "micro_batches_per_step": m, "compute_blocks_per_step": mine["blocks_per_step"],
         "p2p_per_step": mine["p2p_per_step"], "training": mine["training"], "bubble_pct": idle,
         "start_idle_pct": mine["start_idle_pct"], "end_idle_pct": mine["end_idle_pct"],
         "schedule_bubble_pct": expected, "bubble_ms_per_step": mine["bubble_ms_per_step"],
         "per_stage_bubble_pct": {s["rank"]: round(s["bubble_pct"], 1) for s in stages}},
        f"Feed the pipeline more micro-batches per step (the bubble is (p-1)/(m+p-1): m = {4 * p} with p = {p} "
        f"gives {gpipe_bubble_pct(p, 4 * p):.0f}%), with a 1F1B schedule so their activations fit in memory; "
        "interleaved (virtual) stages shrink it further; balance the stages' work so none waits for a slower one.",
    )
    if slower is not None and slower["compute_ms"] > mine["compute_ms"]:
        out += _finding(
            "load-imbalance", idle - gain,
            f"Pipeline stage (rank {mine['rank']}) idles {idle - gain:.0f}% of its step beyond the schedule's "
            f"{expected:.0f}% bubble: the stage on rank {slower['rank']} computes {slower['compute_ms']:.2f} ms per "
            f"step against this stage's {mine['compute_ms']:.2f} ms, and the pipe runs at the slowest stage's pace.",
            {"stages": p, "bubble_pct": idle, "schedule_bubble_pct": expected, "slower_stage_rank": slower["rank"],
             "slower_stage_compute_ms": slower["compute_ms"], "compute_ms": mine["compute_ms"],
             "step_ms": mine["step_ms"]},
            "Balance the stages: move layers (or the loss) off the slower stage, and keep its host from starving "
            "its GPU (launch gaps count as its time too).",
        )
    return out
