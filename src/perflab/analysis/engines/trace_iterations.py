"""A serving trace read as a request stream: what each decoding request waited per token, iteration by iteration.

In iteration i every decoding request gets one token, after waiting that iteration's time on the clock that
paces it (analysis/steps/iterations.py); a prompt prefilled in the same iteration made them wait for it, and so did
iterations that decoded nothing since their previous token (a prompt prefilled alone, as engines without chunked
prefill do): a token's wait runs from the previous decoding iteration's end. So the
per-token latency (ITL) distribution is the iterations' times, each counted once per decode token it carried, and
the prompt tokens inside each wait are the iteration's prefill tokens: the same figures the serving doctor reads
from an engine's log or a benchmark's per-request records (analysis/engines/serving_stalls.py), here from the trace.

Padding shows where the shapes computed more tokens than the engine scheduled (an engine pads a batch to the size of
the CUDA graph it replays, or a static batch keeps finished rows). Pure: no torch.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from perflab.analysis.engines.serving_stalls import gap_figures, step_costs
from perflab.analysis.steps.iterations import Iterations


def _pct(values: np.ndarray, q: float) -> float:
    return round(float(np.percentile(values, q)), 4) if values.size else float("nan")


def serving_figures(it: Iterations) -> dict[str, Any]:
    """ITL percentiles per token, iteration times, tokens per iteration, throughput, the stalls and the cost of a
    prefilling iteration against a decoding one (the keys of serving_stalls.stalls where they mean the same)."""
    times = it.time_us / 1e3
    pf = np.maximum(it.prefill_tokens, 0).astype(np.int64)
    dc = np.maximum(it.decode_tokens, 0).astype(np.int64)
    known = (it.prefill_tokens >= 0) & (it.decode_tokens >= 0)
    out: dict[str, Any] = {
        "engine": it.engine, "iterations": len(it), "clock": it.clock.to_dict(), "tokens_from": it.tokens_from,
        "tokens_known": int(known.sum()),
        "iteration_ms": {"p50": _pct(times, 50), "p90": _pct(times, 90), "p99": _pct(times, 99),
                         "mean": round(float(times.mean()), 4) if times.size else float("nan")},
        "gpu_busy_ms_per_iteration": round(float(it.work.busy_us.mean()) / 1e3, 4) if len(it) else 0.0,
    }
    if not known.any():
        out["cannot_judge"] = ("the iterations carry no token counts (no engine marker with tokens, no embedding "
                               "shapes): profile with record_shapes=True, or name the marker's groups (--marker)")
        return out
    tok = (pf + dc)[known]
    out["tokens_per_iteration"] = {"mean": round(float(tok.mean()), 2), "p50": float(np.median(tok)),
                                   "max": int(tok.max()), "prefill_max": int(pf[known].max()),
                                   "decode_mean": round(float(dc[known].mean()), 2)}
    total_ms = float(times[known].sum())
    out["tokens_per_s"] = round(1e3 * float(tok.sum()) / total_ms, 1) if total_ms > 0 else None
    wait, wait_pf = _waits_since_last_token(times[known], pf[known], dc[known])
    g = np.repeat(wait, dc[known])
    inside = np.repeat(wait_pf, dc[known]).astype(np.float64)
    if g.size:
        out["itl_ms"] = {"p50": _pct(g, 50), "p90": _pct(g, 90), "p99": _pct(g, 99)}
        out["decode_tokens"] = int(g.size)
        out.update(gap_figures(g, inside))
        out["gaps"] = int(g.size)
    kind = it.kinds
    steps = {"end_ms": np.cumsum(times[known]).tolist(), "prefill_tokens": pf[known].tolist(),
             "live": dc[known].tolist(), "kind": kind[known].tolist()}
    out["steps"] = step_costs(steps)
    padding = _padding(it, known)
    if padding:
        out["padding"] = padding
    return out


def _waits_since_last_token(times: np.ndarray, pf: np.ndarray, dc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per iteration: the time its decoding requests waited since their previous token, and the prompt tokens
    prefilled in that wait. Iterations that decoded nothing since the previous decoding iteration (a prompt prefilled
    alone) join the next decoding one's wait; before the first decoding iteration nobody was waiting."""
    decoding = dc > 0
    # each iteration's group: the iterations after the previous decoding one, up to and including this one
    group = np.concatenate(([0], np.cumsum(decoding)[:-1]))
    wait = np.bincount(group, weights=times, minlength=group.size)[group]
    wait_pf = np.bincount(group, weights=pf.astype(np.float64), minlength=group.size)[group]
    first = np.flatnonzero(decoding)[:1]
    if first.size:   # the first decoding iteration's requests had no earlier token: their wait is its own time
        wait[first], wait_pf[first] = times[first], pf[first]
    return wait, wait_pf


def _padding(it: Iterations, known: np.ndarray) -> dict[str, Any] | None:
    """Tokens the shapes computed against the tokens the engine scheduled, where both are known."""
    if it.shape_tokens.size != len(it) or not it.tokens_from.startswith("markers"):
        return None
    both = known & (it.shape_tokens > 0)
    if not both.any():
        return None
    scheduled = (np.maximum(it.prefill_tokens, 0) + np.maximum(it.decode_tokens, 0))[both]
    computed = it.shape_tokens[both]
    extra = np.clip(computed - scheduled, 0, None)
    return {"iterations": int(both.sum()), "computed_tokens": int(computed.sum()),
            "scheduled_tokens": int(scheduled.sum()),
            "padded_tokens_pct": round(100.0 * float(extra.sum()) / float(computed.sum()), 2) if computed.sum() else 0.0}
