"""The serving doctor: a served request stream -> `prefill-stall` and `padded-batch` findings, with the numbers
that decide them, and what the input cannot tell.

    from perflab.doctor.serving import diagnose_serving
    diagnose_serving("serving.json").to_dict()     # or vLLM's / SGLang's benchmark result file

The stream comes from analysis/engines/serving_files.py (the puzzles' engine log, vLLM's `vllm bench serve` result, SGLang's
`bench_serving` JSONL); the numbers from analysis/engines/serving_stalls.py.

- prefill-stall: decode gaps (inter-token latencies) spike, ITL p99 >= STALL_RATIO x p50, the stalled gaps
  hold prefill work (most of them had a prefill end inside), and a step that prefills costs at least STALL_FACTOR
  decode steps (the engine's forwards; else the gaps with a prefill against those without): a long prefill in one
  step, not many short steps in a row (a static batch's admissions, which padded-batch names). The gain is the ITL p99 a token budget per step
  would leave: about STALL_FACTOR x the median gap (a step that carries a chunk costs at most about one more
  decode step), as a share of the p99 now.
- padded-batch (needs the engine's per-step rows): decode rows computed for no request while requests waited.
  A decode forward costs about the same whatever rows it serves, so the gain is the forwards those rows cost.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from perflab.analysis.engines import serving_stalls as st
from perflab.doctor.finding import Finding, Report
from perflab.doctor.finding import rank as rank_findings

STALL_RATIO = {"high": 4.0, "medium": 2.5}   # ITL p99 / p50: the gain to 2 x p50 at least 50 % / 20 %
MIN_STALLED_WITH_PREFILL_PCT = 50.0
MIN_STALLED_GAPS_PCT = 1.0                     # fewer stalls than this and the p99 is not one of them
PADDING_GAIN = {"high": 20.0, "medium": 5.0}
CANNOT_JUDGE = ("prefill-stall", "padded-batch", "per-request records")   # a note naming one: a judgement missing   # forwards the padding while waiting cost, % of all forwards


def prefill_step_ratio(s: dict[str, Any]) -> float | None:
    """How much longer the steps that prefill are than those that only decode: from the engine's forwards where
    known (a step of many short prefills in a row is no long prefill), else from the decode gaps with a prefill
    inside against those without."""
    steps = s.get("steps") or {}
    pair = ((steps.get("prefill_forward_p50_ms"), steps.get("decode_forward_p50_ms")) if steps else
            (s.get("gap_p50_with_prefill_ms"), s.get("gap_p50_without_prefill_ms")))
    return pair[0] / pair[1] if pair[0] and pair[1] else None


def prefill_stall(s: dict[str, Any]) -> Finding | None:
    ratio, step_ratio = s.get("itl_p99_over_p50"), prefill_step_ratio(s)
    if ratio is None or step_ratio is None or s["stalled_with_prefill_pct"] < MIN_STALLED_WITH_PREFILL_PCT \
            or s["stalled_gaps_pct"] < MIN_STALLED_GAPS_PCT or ratio < STALL_RATIO["medium"] \
            or step_ratio < st.STALL_FACTOR:
        return None
    severity = "high" if ratio >= STALL_RATIO["high"] else "medium"
    target = st.STALL_FACTOR * s["itl_p50_ms"]
    gain = max(0.0, 100.0 * (1 - target / s["itl_p99_ms"]))
    fit = s.get("gap_vs_prefill_tokens") or {}
    steps = s.get("steps") or {}
    per_1k = (steps.get("forward_vs_prefill_tokens") or fit).get("ms_per_1k_prefill_tokens")
    evidence = {k: s.get(k) for k in ("itl_p50_ms", "itl_p99_ms", "itl_max_ms", "itl_p99_over_p50", "tpot_p50_ms",
                                      "tpot_p99_ms", "ttft_p50_ms", "ttft_p99_ms", "stalled_gaps",
                                      "stalled_gaps_pct", "stalled_with_prefill_pct",
                                      "prefill_tokens_in_stalled_gap_p50", "gap_p50_without_prefill_ms",
                                      "gap_p50_with_prefill_ms") if s.get(k) is not None}
    evidence["ms_per_1k_prefill_tokens"] = per_1k
    evidence["prefill_step_over_decode_step"] = round(step_ratio, 3)
    evidence["worst_gap"] = s.get("worst_gap")
    if steps:
        evidence["prefill_tokens_per_forward_max"] = steps["prefill_tokens_per_forward_max"]
    evidence["gain_basis"] = f"ITL p99 down to ~{target:.3g} ms ({st.STALL_FACTOR:g} x the median gap)"
    # the range is of the ITL p99, as the gain: no lower than the median gap (a step that only decodes); no floor,
    # as the chunk each step carries is the schedule's choice (a larger token budget leaves longer steps)
    evidence["speedup_at_most"] = round(s["itl_p99_ms"] / s["itl_p50_ms"], 2)
    tok = s["prefill_tokens_in_stalled_gap_p50"]
    return Finding(
        id="prefill-stall", severity=severity, gain_pct=round(gain, 1), evidence=evidence,
        summary=f"Decodes stall behind prefills: ITL p99 {s['itl_p99_ms']:.3g} ms is {ratio:.1f}x the median "
                f"{s['itl_p50_ms']:.3g} ms; {s['stalled_with_prefill_pct']:.0f} % of the {s['stalled_gaps']} stalled "
                f"gaps had a prefill inside (median {tok:,.0f} prompt tokens)"
                + (f", each 1,000 prompt tokens costing {per_1k:.3g} ms" if per_1k else "") + ".",
        fix="Schedule by a token budget per step: split long prefills into chunks that ride along with the decodes "
            "(vLLM: --enable-chunked-prefill with --max-num-batched-tokens; SGLang: --chunked-prefill-size), so "
            "no step carries more prompt tokens than the decodes can wait for; TTFT of long prompts grows a little.")


def padded_batch(p: dict[str, Any], analytic: dict[str, Any] | None = None) -> Finding | None:
    gain = p["gain_pct"]
    if gain < PADDING_GAIN["medium"]:
        return None
    severity = "high" if gain >= PADDING_GAIN["high"] else "medium"
    evidence = {k: p[k] for k in ("slots", "padded_rows_pct", "padded_while_waiting_pct", "padded_while_waiting_rows",
                                  "decoding_forwards", "forwards", "forwards_saved_if_filled", "occupancy")}
    evidence["mean_live_rows"] = round(p["live_rows"] / p["decoding_forwards"], 3) if p["decoding_forwards"] else 0.0
    # the range is of the forwards: the floor fills the rows padded while requests waited (a static batch computes
    # every slot anyway, so a filled forward costs what the padded one did); the ceiling computes the live rows alone,
    # every decoding forward full, the prefill forwards kept
    forwards, best = p["forwards"], p["forwards"] - p["decoding_forwards"] + p["live_rows"] / p["slots"]
    evidence["speedup_at_least"] = round(forwards / (forwards - p["forwards_saved_if_filled"]), 2)
    if best > 0:
        evidence["speedup_at_most"] = round(forwards / best, 2)
    if analytic:
        evidence["cost_model"] = {k: analytic[k] for k in ("static_forwards", "continuous_forwards", "ratio")}
    return Finding(
        id="padded-batch", severity=severity, gain_pct=gain, evidence=evidence,
        summary=f"{p['padded_rows_pct']:.0f} % of the decode rows served no request ({evidence['mean_live_rows']:.1f} "
                f"of {p['slots']} live per forward); {p['padded_while_waiting_pct']:.0f} % were padding while "
                f"requests waited, about {p['forwards_saved_if_filled']:,.0f} of {p['forwards']:,} forwards.",
        fix="Continuous (in-flight) batching: when a request has all its tokens, give its slot to the next waiting "
            "request at once instead of decoding the batch until its longest request ends.")


def findings_for(stream: st.Stream, analytic: dict[str, Any] | None = None) -> tuple[list[Finding], dict[str, Any]]:
    """The serving findings of a stream and the analyses behind them (with `cannot_judge`: what the input lacks)."""
    judged = [n for n in stream.notes if n.split(":")[0] in CANNOT_JUDGE]
    analyses: dict[str, Any] = {"stalls": st.stalls(stream), "cannot_judge": judged,
                                "notes": [n for n in stream.notes if n not in judged]}
    found = []
    if stream.tokens_ms and analyses["stalls"]["gaps"] == 0:
        analyses["cannot_judge"].append("prefill-stall: no request has two tokens")
    elif stream.placed and stream.tokens_ms and (f := prefill_stall(analyses["stalls"])) is not None:
        found.append(f)
    if stream.steps is not None and "live" in stream.steps:
        analyses["padding"] = st.padding(stream.steps)
        if (f := padded_batch(analyses["padding"], analytic)) is not None:
            found.append(f)
    else:
        analyses["cannot_judge"].append(
            "padded-batch: the file has no per-step batch composition (rows per forward, requests waiting); a "
            "request benchmark cannot see padded rows. The engine's per-step log can (perflab's serving engine log)")
    return rank_findings(found), analyses


def report(stream: st.Stream, source: dict[str, Any], analytic: dict[str, Any] | None = None) -> Report:
    findings, analyses = findings_for(stream, analytic)
    s = analyses["stalls"]
    judged = stream.placed and s.get("itl_p50_ms") is not None
    if findings:
        verdict = findings[0].summary
        others = [f.id for f in findings[1:] if f.severity in ("high", "medium")]
        if others:
            verdict += f" Also: {', '.join(others)}."
    elif judged:
        findings = [Finding(id="healthy", severity="info", gain_pct=0.0,
                            evidence={k: s.get(k) for k in ("itl_p50_ms", "itl_p99_ms", "itl_p99_over_p50",
                                                            "tpot_p50_ms", "tpot_p99_ms")},
                            summary=_healthy(s, "padding" in analyses),
                            fix="Nothing to fix in the schedule this file shows.")]
        verdict = findings[0].summary
    else:
        seen = _reported(s, source.get("reported") or {})
        verdict = (f"{seen}. " if seen else "") + "Cannot judge the schedule: " + "; ".join(analyses["cannot_judge"])
    if analyses["cannot_judge"] and findings:
        verdict += " Cannot judge: " + "; ".join(c.split(":")[0] for c in analyses["cannot_judge"]) + "."
    return Report(source=source, verdict=verdict, findings=findings, analyses=analyses)


def _healthy(s: dict[str, Any], padding_seen: bool) -> str:
    text = f"No long prefill stalls the decodes: ITL p99 {s['itl_p99_ms']:.3g} ms is {s['itl_p99_over_p50']:.1f}x the median"
    step_ratio = prefill_step_ratio(s)
    if s["itl_p99_over_p50"] >= STALL_RATIO["medium"] and step_ratio is not None:
        text += (f", but a step that prefills costs {step_ratio:.1f}x a decode step: the spikes are several short "
                 "steps in a row, not one long prefill")
    return text + ("; no padded batch." if padding_seen else ".")


def _reported(s: dict[str, Any], reported: dict[str, Any]) -> str:
    """The latency numbers there are (from the gaps, else the file's aggregates), for a verdict that cannot judge."""
    p50 = s.get("itl_p50_ms", reported.get("median_itl_ms"))
    p99 = s.get("itl_p99_ms", reported.get("p99_itl_ms"))
    tpot = [s.get("tpot_p50_ms", reported.get("median_tpot_ms")), s.get("tpot_p99_ms", reported.get("p99_tpot_ms"))]
    parts = []
    if p50 and p99:
        parts.append(f"ITL p50 {p50:.3g} ms, p99 {p99:.3g} ms ({p99 / p50:.1f}x)")
    if all(isinstance(t, (int, float)) and t == t for t in tpot):
        parts.append(f"TPOT p50 {tpot[0]:.3g} ms, p99 {tpot[1]:.3g} ms")
    return "; ".join(parts)


def diagnose_serving(path: str | Path, variant: str | None = None) -> Report:
    from perflab.analysis.engines.serving_files import load_stream

    loaded = load_stream(Path(path), variant=variant)
    return report(loaded.stream, loaded.source, loaded.analytic)
