"""Serving-level findings from a trace's iterations (doctor.context.Context.serving): the level above the system's.

- prefill-stall: the per-token latency (ITL) spikes where a prompt is prefilled in the same iteration as the
  decodes, and an iteration that prefills costs at least twice one that only decodes: the serving doctor's rule
  (doctor/serving.py) on the figures the trace gives (analysis/engines/trace_iterations.py).
- padded-batch: the shapes computed at least a fifth more tokens than the engine scheduled (rows padded to a
  captured graph's batch size, or finished requests kept in a static batch).
- below-roof for iterations: with the model described (`--model`), iterations whose time is far from their speed
  of light (weights, KV cache and FLOPs against the GPU's ceilings), whatever kernels (graph replays, custom ones)
  ran them. At 80 % of that roof or more, the iterations are judged near it.

The gains of prefill-stall are of the ITL p99 (what chunking the prefills buys the decodes); the others of the
step time.
"""
from __future__ import annotations

import numpy as np

from perflab.doctor.context import Context
from perflab.doctor.finding import Finding
from perflab.doctor.registry import rule, significant

PADDED_MIN_PCT = 20.0
NEAR_ROOF = 80.0          # % of an iteration's speed of light that counts as at its roof
SPIKES = 2.5              # ITL p99 / p50 from which the tail is no healthy one (doctor/serving.py's medium stall)


def _longest(ctx: Context, kind: str, n: int = 5) -> list:
    it = ctx.iterations
    times = it.time_us
    pf = it.prefill_tokens
    sel = np.flatnonzero(pf > 0) if kind == "prefill" else np.flatnonzero(pf == 0)
    sel = sel[np.argsort(-times[sel], kind="stable")][:n]
    return [ctx.event(int(it.rows[i])) for i in sel.tolist()]


@rule
def prefill_stall(ctx: Context) -> list[Finding]:
    s = ctx.serving
    if not s or "itl_ms" not in s:
        return []
    from perflab.doctor.serving import prefill_stall as stall_finding

    f = stall_finding(s)
    if f is None:
        return []
    f.evidence.update({"iterations": s["iterations"], "itl_p90_ms": s["itl_ms"]["p90"],
                       "tokens_per_iteration_mean": s["tokens_per_iteration"]["mean"],
                       "clock": s["clock"]["clock"], "engine": s["engine"]})
    f.events = _longest(ctx, "prefill")
    return [f]


@rule
def padded_iterations(ctx: Context) -> list[Finding]:
    s = ctx.serving
    pad = (s or {}).get("padding")
    if not pad or pad["padded_tokens_pct"] < PADDED_MIN_PCT:
        return []
    gain = pad["padded_tokens_pct"]
    return significant(
        "padded-batch", gain,
        f"The iterations computed {pad['computed_tokens']:,} tokens where the engine scheduled "
        f"{pad['scheduled_tokens']:,}: {gain:.0f}% of the rows were padding.",
        {**pad, "engine": s["engine"]},
        "Schedule what is computed: capture CUDA graphs for more batch sizes (vLLM: cudagraph_capture_sizes) or "
        "fill the padded rows with waiting requests (continuous batching); a static batch keeps finished rows "
        "until its longest request ends.")


@rule
def iterations_below_roof(ctx: Context) -> list[Finding]:
    roof = (ctx.serving or {}).get("roof")
    if not roof or not roof.get("priced_iterations") or roof.get("pct_of_roof") is None:
        return []
    it = ctx.iterations
    rows = roof["per_iteration"]
    pct = roof["pct_of_roof"]
    if pct >= NEAR_ROOF:
        return []
    gap_ms = sum(max(0.0, r["time_ms"] - r["sol_ms"] / (NEAR_ROOF / 100)) for r in rows)
    kinds = ", ".join(f"{k}: {v['iterations']} at {v['pct_of_roof_p50']:.0f}% ({v['time_ms_p50']:.3g} ms, "
                      f"speed of light {v['sol_ms_p50']:.3g} ms, {v['bound']}-bound)" for k, v in roof["by_kind"].items())
    m = roof["model"]
    c = roof["ceilings"]
    summary = (f"The iterations run at {pct:.0f}% of their speed of light from the model ({m['name']}, "
               f"{m['params_b']:.2f} B parameters, {m['weight_bytes_per_param']:g} bytes each, tp {m['tp']}; "
               f"{c['dram_gbps']:,.0f} GB/s, {c['path']} {c['peak_tflops']} TFLOP/s): {kinds}.")
    return significant(
        "below-roof", ctx.share(gap_ms * 1e3), summary,
        {"pct_of_roof": pct, "priced_iterations": roof["priced_iterations"], "iterations": len(it),
         "sol_ms_total": roof["sol_ms_total"], "time_ms_total": roof["time_ms_total"], "model": m["name"],
         "ceilings": c["source"], "notes": m["notes"]},
        "Find which kernels hold the iterations back: profile the longest kernels of a decode iteration with Nsight "
        "Compute (perflab investigate), check that the weights are read once per iteration (fused QKV/MLP "
        "projections, no dequantize pass) and that the GPU never waits between the iteration's kernels.",
        _longest(ctx, "decode"))


def serving_verdict(s: dict, findings: list[Finding]) -> str:
    """The serving level's verdict in one sentence: its finding, else healthy iterations, else what it lacks."""
    ours = [f for f in findings if f.id in ("prefill-stall", "padded-batch")]
    if ours:
        return ours[0].summary
    if s.get("cannot_judge"):
        return "Serving level not judged: " + s["cannot_judge"]
    if "itl_ms" not in s:
        return f"{s['iterations']} iterations, none decoding: no per-token latency to judge."
    itl = s["itl_ms"]
    ratio = itl["p99"] / itl["p50"] if itl["p50"] else float("nan")
    if ratio >= SPIKES:   # a tail that no prefill explains is no healthy schedule either
        return (f"Per-token latency spikes that no prefill explains: p99 {itl['p99']:.3g} ms is {ratio:.1f}x the "
                f"median {itl['p50']:.3g} ms, and {s.get('stalled_with_prefill_pct', 0):.0f}% of the stalled gaps "
                "held a prefill; the system findings say what the GPU waited for in the slow iterations.")
    return (f"Healthy iterations: per-token latency p50 {itl['p50']:.3g} ms, p99 {itl['p99']:.3g} ms ({ratio:.1f}x); "
            "no prefill holds the decodes back.")
