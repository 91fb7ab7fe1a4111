"""A served request stream, end to end: what each request waited and how full each batch ran.

The input is a serving engine's log (`perflab.workloads.serving.Engine.log()`, recorded into serving.json):
per forward pass its kind (prefill | decode), the slots that emitted a token for a live request, the
requests still waiting, and when it ended (ms from the stream's start, every request there at 0); per
request the forwards that emitted its tokens. Pure functions, no torch.

- `requests(log)`: per request TTFT (time to first token), TPOT (time per output token after the first)
  and end-to-end latency.
- `batch_use(log)`: decode rows computed vs rows that served a live request; the padding share, overall
  and while requests waited (the share a better schedule could have filled).
- `summary(log)`: throughput (requests/s, tokens/s) and the percentiles of the above.
- `forward_counts(lengths, slots)`: the two schedules' cost in forward passes, from the lengths alone.
"""
from __future__ import annotations

import heapq
import math
from typing import Any

import numpy as np

SCHEMA = "perflab.serving/1"
DECODING = ("decode", "mixed")   # forward kinds in which every slot computes a decode row


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100), linear between the closest ranks; NaN for no values."""
    return float(np.percentile(values, q)) if values else math.nan


def _ends(log: dict[str, Any]) -> list[float]:
    ends = log["forwards"].get("end_ms")
    if not ends:
        raise ValueError("the serving log has no times (record it with the engine timed)")
    return ends


def arrivals_ms(log: dict[str, Any]) -> list[float]:
    """When each request arrived, ms from the stream's start: the end of the forward after which it arrived
    (`arrival_forward`; a log without it, or -1: at the start, as a burst)."""
    ends = _ends(log)
    return [ends[f] if f >= 0 else 0.0 for f in log.get("arrival_forward") or [-1] * len(log["token_forwards"])]


def requests(log: dict[str, Any]) -> list[dict[str, Any]]:
    """Per request: output_len, arrival_ms, ttft_ms (from its arrival), tpot_ms (None for one token),
    latency_ms (its last token, from its arrival)."""
    ends = _ends(log)
    out = []
    for r, (forwards, arrival) in enumerate(zip(log["token_forwards"], arrivals_ms(log))):
        first, last, n = ends[forwards[0]], ends[forwards[-1]], len(forwards)
        out.append({"request": r, "output_len": n, "arrival_ms": arrival, "ttft_ms": first - arrival,
                    "latency_ms": last - arrival, "tpot_ms": (last - first) / (n - 1) if n > 1 else None})
    return out


def batch_use(log: dict[str, Any]) -> dict[str, Any]:
    """How full the decode forwards ran: every slot computes a row; a row serves a request or is padding."""
    f = log["forwards"]
    decode = [i for i, k in enumerate(f["kind"]) if k in DECODING]
    slots = int(log["slots"])
    rows = slots * len(decode)
    live = sum(f["live"][i] for i in decode)
    waited = [i for i in decode if f["waiting"][i] > 0]
    waited_rows = slots * len(waited)
    waited_live = sum(f["live"][i] for i in waited)
    return {"slots": slots, "prefill_forwards": f["kind"].count("prefill"), "decode_forwards": len(decode),
            "decode_rows": rows, "live_rows": live,
            "padded_rows_pct": 100.0 * (rows - live) / rows if rows else 0.0,
            "mean_live_rows": live / len(decode) if decode else 0.0,
            "decode_forwards_while_waiting": len(waited),
            "padded_while_waiting_pct": 100.0 * (waited_rows - waited_live) / waited_rows if waited_rows else 0.0}


def summary(log: dict[str, Any]) -> dict[str, Any]:
    """Throughput over the stream and the latency percentiles every serving benchmark reports."""
    reqs = requests(log)
    span_ms = max(r["arrival_ms"] + r["latency_ms"] for r in reqs)
    tokens = sum(r["output_len"] for r in reqs)
    out: dict[str, Any] = {"requests": len(reqs), "tokens": tokens, "makespan_ms": span_ms,
                           "requests_per_s": 1e3 * len(reqs) / span_ms, "tokens_per_s": 1e3 * tokens / span_ms}
    tpot = [r["tpot_ms"] for r in reqs if r["tpot_ms"] is not None]
    for name, values in (("ttft", [r["ttft_ms"] for r in reqs]), ("tpot", tpot),
                         ("latency", [r["latency_ms"] for r in reqs])):
        out[f"{name}_mean_ms"] = sum(values) / len(values) if values else math.nan
        for q in (50, 90, 99):
            out[f"{name}_p{q}_ms"] = percentile(values, q)
    forwards = len(log["forwards"]["kind"])
    out["forwards"] = forwards
    out["ms_per_forward"] = span_ms / forwards if forwards else math.nan
    out.update(batch_use(log))
    return out


def forward_counts(lengths: list[int], slots: int) -> dict[str, Any]:
    """The cost of serving `lengths` (tokens per request, all waiting at once, taken in order) with `slots`
    KV-cache slots, in forward passes. Every request costs one prefill forward (its first token) in both
    schedules; a decode forward gives every slot one token.

    - static: batches of `slots` requests, each decoded until its longest is done: N + sum_b (max_b - 1).
      In rows: slots x sum_b max_b computed for sum(lengths) that serve a request.
    - continuous: a slot takes the next request the moment its own is done: N + the decode forwards until
      the last slot is done (simulated: FIFO admission). Lower bound sum(len - 1) / slots when the batch
      stays full.
    A decode forward of a small model at these batch sizes costs about one read of the weights, whatever
    number of its rows serve a request, so the ratio of forwards is the speed-up to expect.
    """
    n = len(lengths)
    batches = [lengths[i:i + slots] for i in range(0, n, slots)]
    static_decodes = sum(max(b) - 1 for b in batches)
    free = [0] * slots          # the decode forward after which each slot is free
    end = 0
    for length in lengths:
        start = heapq.heappop(free)
        heapq.heappush(free, start + length - 1)
        end = max(end, start + length - 1)
    static, continuous = n + static_decodes, n + end
    return {"requests": n, "slots": slots, "tokens": sum(lengths), "longest": max(lengths),
            "static_forwards": static, "static_decode_forwards": static_decodes,
            "static_rows": slots * sum(max(b) for b in batches),
            "continuous_forwards": continuous, "continuous_decode_forwards": end,
            "continuous_decode_lower_bound": math.ceil(sum(x - 1 for x in lengths) / slots),
            "ratio": static / continuous}
