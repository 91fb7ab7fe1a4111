"""A trace's serving iterations (analyses.serving) as lines of text, for the terminal and the HTML page."""
from __future__ import annotations

from typing import Any


def _ms(v: Any) -> str:
    return "-" if v is None or v != v else f"{v:.3g}"


def serving_lines(s: dict | None) -> list[str]:
    """What the serving level read: iterations, their clock, per-token latency, tokens, the roof, the verdict."""
    if not s:
        return []
    clock = "the GPU's clock" if s["clock"]["clock"] == "gpu" else "the host's clock"
    it = s["iteration_ms"]
    head = (f"serving: {s['iterations']} iterations ({s['engine']}) on {clock}"
            + (f", tokens from {s['tokens_from']}" if s.get("tokens_from") else "")
            + f"; iteration p50 {_ms(it['p50'])} ms, p90 {_ms(it['p90'])}, p99 {_ms(it['p99'])}, mean {_ms(it['mean'])}")
    lines = [head]
    if s.get("itl_ms"):
        itl, tok = s["itl_ms"], s["tokens_per_iteration"]
        lines.append(f"  per token (ITL): p50 {_ms(itl['p50'])} ms, p90 {_ms(itl['p90'])}, p99 {_ms(itl['p99'])}; "
                     f"{tok['mean']:,.1f} tokens per iteration ({tok['decode_mean']:,.1f} decoding, prefill up to "
                     f"{tok['prefill_max']:,}); {s['tokens_per_s'] or 0:,.0f} tokens/s")
    steps = s.get("steps") or {}
    if steps.get("decode_forward_p50_ms") and steps.get("prefill_forward_p50_ms"):
        fit = steps.get("forward_vs_prefill_tokens") or {}
        per_1k = fit.get("ms_per_1k_prefill_tokens")
        lines.append(f"  decode-only iterations p50 {_ms(steps['decode_forward_p50_ms'])} ms; with a prefill p50 "
                     f"{_ms(steps['prefill_forward_p50_ms'])} ms"
                     + (f" ({per_1k:.3g} ms per 1,000 prompt tokens)" if per_1k else ""))
    roof = s.get("roof")
    if roof and roof.get("pct_of_roof") is not None:
        m, c = roof["model"], roof["ceilings"]
        kinds = "; ".join(f"{k} p50 {v['time_ms_p50']:.3g} ms vs {v['sol_ms_p50']:.3g} ms ({v['pct_of_roof_p50']:.0f}%, "
                          f"{v['bound']})" for k, v in roof["by_kind"].items())
        lines.append(f"  speed of light from the model ({m['name']}, {m['params_b']:.2f} B params, tp {m['tp']}; "
                     f"{c['dram_gbps']:,.0f} GB/s, {c['path']} {c['peak_tflops']} TFLOP/s): {roof['pct_of_roof']:.0f}% "
                     f"of roof over {roof['priced_iterations']} iterations; {kinds}")
        lines += [f"  note: {n}" for n in m.get("notes") or []]
    elif roof is None and s.get("itl_ms"):
        lines.append("  speed of light per iteration: give the model (--model config.json) to weigh each iteration "
                     "against its weights, KV cache and FLOPs")
    if s.get("padding"):
        p = s["padding"]
        lines.append(f"  computed {p['computed_tokens']:,} tokens for {p['scheduled_tokens']:,} scheduled "
                     f"({p['padded_tokens_pct']:.0f}% padding)")
    lines.append(f"  serving verdict: {s['verdict']}")
    return lines
