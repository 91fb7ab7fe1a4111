"""Decode stalls of a served stream: how long running requests waited between their tokens, and how much
prefill work sat in each wait. Pure functions on a *stream* (`Stream`), which every source fills as far as it
can: the puzzles' engine log (every forward: end time, prefill tokens, live decode rows), or a serving
benchmark's per-request records (vLLM's `vllm bench serve --save-result --save-detailed`, SGLang's
`bench_serving --output-details`: each request's start, TTFT and inter-token latencies, prompt length).

A request's tokens come at times t_0 (its first: the end of its prefill) < t_1 < ...; a *gap* is t_i - t_(i-1),
the inter-token latency (ITL) that vLLM and SGLang report per token. A prefill that ends inside another request's
gap held that request's decode back for its duration, unless the engine split it into chunks that ride along
with the decodes. So per gap: its length, and the prompt tokens whose prefill ended inside it (the engine log
knows the tokens each forward prefilled; a benchmark knows when each request's first token came and how long its
prompt was). Whole-prompt prefills show as gaps that grow with the prompt tokens in them; chunked prefill as
gaps of about the same length whatever arrives.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from perflab.analysis.engines.serving import percentile

STALL_FACTOR = 2.0   # a gap at least this many times the median gap is a stall


@dataclass
class Stream:
    """A served stream on one clock (ms). tokens_ms[r]: request r's token times (first = its first token);
    prefills: (end_ms, prompt tokens) of every prefill, whole or chunk; steps: the engine's forwards, where known."""
    source: str
    tokens_ms: list[list[float]]
    prefills: list[tuple[float, int]]
    arrival_ms: list[float] | None = None
    input_lens: list[int] | None = None
    steps: dict[str, Any] | None = None        # end_ms, prefill_tokens, live, kind, waiting, slots
    notes: list[str] = field(default_factory=list)
    placed: bool = True                        # the requests share one clock (else gaps only, no prefills)


def gaps(stream: Stream) -> tuple[np.ndarray, np.ndarray]:
    """(gap ms, prompt tokens prefilled inside the gap) over every token after a request's first."""
    if stream.prefills:
        times, tokens = (np.asarray(v, dtype=np.float64) for v in zip(*sorted(stream.prefills)))
    else:
        times, tokens = np.zeros(0), np.zeros(0)
    cum = np.concatenate(([0.0], np.cumsum(tokens)))
    length, inside = [], []
    for ts in stream.tokens_ms:
        t = np.asarray(ts, dtype=np.float64)
        if t.size < 2:
            continue
        a, b = t[:-1], t[1:]
        length.append(b - a)
        # prefills that ended in (a, b]: a request's own first token is at a, so its own prefill is not counted
        inside.append(cum[np.searchsorted(times, b, side="right")] - cum[np.searchsorted(times, a, side="right")])
    if not length:
        return np.zeros(0), np.zeros(0)
    return np.concatenate(length), np.concatenate(inside)


def _fit(x: np.ndarray, y: np.ndarray) -> dict[str, float] | None:
    """Least squares y = a + b x: b in ms per 1,000 prefill tokens; None where x does not vary."""
    if x.size < 3 or np.ptp(x) == 0:
        return None
    b, a = np.polyfit(x, y, 1)
    pred = a + b * x
    ss = float(((y - y.mean()) ** 2).sum())
    return {"ms_at_0_tokens": round(float(a), 4), "ms_per_1k_prefill_tokens": round(float(b) * 1e3, 4),
            "r2": round(1 - float(((y - pred) ** 2).sum()) / ss, 3) if ss > 0 else 1.0}


def stalls(stream: Stream) -> dict[str, Any]:
    """ITL distribution, the stalls (gaps >= STALL_FACTOR x the median) and the prefill tokens inside them, the
    gap against the prefill tokens in it, and per request TPOT / TTFT percentiles."""
    g, tok = gaps(stream)
    out: dict[str, Any] = {"source": stream.source, "requests": len(stream.tokens_ms), "gaps": int(g.size)}
    tpot = [(t[-1] - t[0]) / (len(t) - 1) for t in stream.tokens_ms if len(t) > 1]
    for q in (50, 99):
        out[f"tpot_p{q}_ms"] = round(percentile(tpot, q), 4)
    if stream.arrival_ms is not None:
        ttft = [t[0] - a for t, a in zip(stream.tokens_ms, stream.arrival_ms) if t]
        for q in (50, 99):
            out[f"ttft_p{q}_ms"] = round(percentile(ttft, q), 4)
    if g.size == 0:
        return out
    out.update(gap_figures(g, tok))
    if stream.steps is not None:
        out["steps"] = step_costs(stream.steps)
    return out


def gap_figures(g: np.ndarray, tok: np.ndarray) -> dict[str, Any]:
    """The ITL distribution of the gaps `g` (ms), the stalls (gaps >= STALL_FACTOR x the median), the prompt tokens
    `tok` prefilled inside each, and the gap against those tokens."""
    out: dict[str, Any] = {}
    p50, p99 = float(np.percentile(g, 50)), float(np.percentile(g, 99))
    stalled = g >= STALL_FACTOR * p50
    out.update({"itl_p50_ms": round(p50, 4), "itl_p99_ms": round(p99, 4), "itl_max_ms": round(float(g.max()), 4),
                "itl_p99_over_p50": round(p99 / p50, 3) if p50 > 0 else None,
                "stalled_gaps": int(stalled.sum()), "stalled_gaps_pct": round(100.0 * stalled.mean(), 3),
                "stalled_with_prefill_pct": round(100.0 * float((tok[stalled] > 0).mean()), 3) if stalled.any() else 0.0,
                "prefill_tokens_in_stalled_gap_p50": float(np.median(tok[stalled])) if stalled.any() else 0.0,
                "gaps_with_prefill": int((tok > 0).sum()),
                "gap_p50_without_prefill_ms": round(float(np.median(g[tok == 0])), 4) if (tok == 0).any() else None,
                "gap_p50_with_prefill_ms": round(float(np.median(g[tok > 0])), 4) if (tok > 0).any() else None,
                "gap_vs_prefill_tokens": _fit(tok, g)})
    worst = int(np.argmax(g))
    out["worst_gap"] = {"ms": round(float(g[worst]), 4), "prefill_tokens": int(tok[worst])}
    return out


def step_costs(steps: dict[str, Any]) -> dict[str, Any]:
    """Per engine forward: its time (end minus the previous end) against the prompt tokens it prefilled."""
    ends = np.asarray(steps["end_ms"], dtype=np.float64)
    dur = np.diff(np.concatenate(([0.0], ends)))
    tok = np.asarray(steps["prefill_tokens"], dtype=np.float64)
    rows = np.asarray(steps["live"], dtype=np.float64)
    decoding = np.asarray([k != "prefill" for k in steps["kind"]])
    out: dict[str, Any] = {"forwards": int(dur.size), "prefill_tokens_per_forward_max": int(tok.max(initial=0)),
                           "prefill_tokens_per_forward_mean": round(float(tok.mean()), 2) if tok.size else 0.0,
                           "decode_rows_per_forward_mean": round(float(rows[decoding].mean()), 3) if decoding.any() else 0.0,
                           "forward_vs_prefill_tokens": _fit(tok, dur)}
    pure = decoding & (tok == 0)
    if pure.any():
        out["decode_forward_p50_ms"] = round(float(np.median(dur[pure])), 4)
    if (tok > 0).any():
        out["prefill_forward_p50_ms"] = round(float(np.median(dur[tok > 0])), 4)
    return out


def padding(steps: dict[str, Any]) -> dict[str, Any]:
    """Decode rows computed (every slot, every decoding forward) against rows that served a live request, overall
    and while requests waited; the occupancy histogram; the forwards the padding while waiting cost."""
    slots = int(steps["slots"])
    idx = [i for i, k in enumerate(steps["kind"]) if k != "prefill"]
    live = np.asarray([steps["live"][i] for i in idx], dtype=np.int64)
    waiting = np.asarray([steps["waiting"][i] > 0 for i in idx], dtype=bool)
    rows = slots * live.size
    padded_waiting = int((slots - live[waiting]).sum())
    forwards = len(steps["kind"])
    return {"slots": slots, "decoding_forwards": int(live.size), "decode_rows": rows, "live_rows": int(live.sum()),
            "padded_rows_pct": round(100.0 * (rows - live.sum()) / rows, 3) if rows else 0.0,
            "padded_while_waiting_rows": padded_waiting,
            "padded_while_waiting_pct": round(100.0 * padded_waiting / (slots * waiting.sum()), 3) if waiting.any() else 0.0,
            "occupancy": {str(n): int(c) for n, c in zip(*np.unique(live, return_counts=True))},
            "forwards": forwards,
            # a decode forward costs about the same whatever rows it serves (memory-bound at these batch sizes):
            # filled, the rows padded while requests waited would have saved this many forwards
            "forwards_saved_if_filled": round(padded_waiting / slots, 2),
            "gain_pct": round(100.0 * padded_waiting / slots / forwards, 2) if forwards else 0.0}


def from_engine_log(log: dict[str, Any], source: str = "perflab engine log") -> Stream:
    """The puzzles' engine log (perflab.workloads.serving.Engine.log(), timed) as a Stream."""
    from perflab.analysis.engines.serving import arrivals_ms, _ends

    ends = _ends(log)
    f = log["forwards"]
    kinds = f["kind"]
    tokens = f.get("prefill_tokens") or [int(log["prompt_len"]) if k == "prefill" else 0 for k in kinds]
    steps = {"end_ms": ends, "prefill_tokens": tokens, "live": f["live"], "kind": kinds, "waiting": f["waiting"],
             "slots": log["slots"]}
    return Stream(source=source, tokens_ms=[[ends[i] for i in fw] for fw in log["token_forwards"]],
                  prefills=[(ends[i], int(n)) for i, n in enumerate(tokens) if n],
                  arrival_ms=arrivals_ms(log), input_lens=[int(log["prompt_len"])] * len(log["token_forwards"]),
                  steps=steps)
