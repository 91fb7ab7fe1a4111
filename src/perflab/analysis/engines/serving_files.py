"""Serving records as a `Stream` (analysis/engines/serving_stalls.py), recognised by content:

- perflab's serving.json (schema perflab.serving/1: per variant the engine's log) or one engine log
  (`perflab.workloads.serving.Engine.log()`, timed): every forward with its end, prefill tokens and live rows;
- vLLM's serving benchmark result (`vllm bench serve --save-result`, earlier `benchmarks/benchmark_serving.py
  --save-result`): one JSON object (`--append-result`: one per line) with the aggregate metrics (median_ttft_ms,
  p99_tpot_ms, p99_itl_ms, ...) and, with `--save-detailed` (always, in the older script), per request
  input_lens, output_lens, ttfts and itls in seconds, errors, and in recent versions start_times
  (time.perf_counter() at each request's send);
- SGLang's `python -m sglang.bench_serving --output-file X.jsonl`: one JSON line per run, the aggregates and,
  with `--output-details`, input_lens, output_lens, ttfts, itls (seconds), generated_texts, errors; no start times.

No benchmark file has per-step batch composition; without start times (and not a burst: request rate inf with no
concurrency limit) the requests cannot be put on one clock, so a decode gap cannot be tied to a prefill.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perflab.analysis.engines.serving_stalls import Stream, from_engine_log
from perflab.errors import UnreadableInput
from perflab.trace.read_limits import json_depth
from perflab.trace.sniff import open_binary

PER_REQUEST = ("ttfts", "itls", "input_lens")
AGGREGATES = ("median_ttft_ms", "mean_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms", "median_itl_ms",
              "p99_itl_ms", "mean_itl_ms", "max_itl_ms", "request_throughput", "duration", "completed")


@dataclass
class Loaded:
    stream: Stream
    source: dict[str, Any]
    analytic: dict[str, Any] | None = None


def is_serving(doc: Any) -> bool:
    return isinstance(doc, dict) and (("token_forwards" in doc and "forwards" in doc) or "variants" in doc
                                      and str(doc.get("schema", "")).startswith("perflab.serving")
                                      or any(k in doc for k in PER_REQUEST) or "median_ttft_ms" in doc)


def _documents(path: Path) -> list[Any]:
    with open_binary(path) as fh:
        text = fh.read().decode("utf-8", errors="replace")
    try:
        return [json.loads(text)]
    except json.JSONDecodeError:
        pass
    docs = []
    for i, line in enumerate(text.splitlines()):
        if line.strip():
            try:
                docs.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise UnreadableInput(f"{path}: line {i + 1} is not JSON ({exc.msg})") from None
    return docs


def load_stream(path: Path, variant: str | None = None) -> Loaded:
    with json_depth(path):
        docs = [d for d in _documents(path) if is_serving(d)]
    if not docs:
        raise UnreadableInput(f"{path}: not a serving record (perflab serving.json or engine log, vLLM or SGLang "
                              "serving benchmark result)")
    doc = docs[-1]
    if "variants" in doc or "token_forwards" in doc:
        return _perflab(path, doc, variant)
    loaded = _benchmark(path, doc)
    if len(docs) > 1:
        loaded.source["runs_in_file"] = len(docs)
        loaded.stream.notes.append(f"the file holds {len(docs)} runs: the last one is judged")
    return loaded


def _perflab(path: Path, doc: dict[str, Any], variant: str | None) -> Loaded:
    source: dict[str, Any] = {"path": str(path), "kind": "serving", "format": "perflab engine log", "device": ""}
    analytic = None
    if "variants" in doc:
        names = list(doc["variants"])
        chosen = variant or ("slow" if "slow" in names else names[0])
        if chosen not in names:
            raise UnreadableInput(f"{path}: no {chosen!r} run (it has {', '.join(names)})")
        log = doc["variants"][chosen]["log"]
        source.update(variant=chosen, variants=names, device=(doc.get("manifest") or {}).get("gpu", ""),
                      puzzle=doc.get("puzzle", ""))
        analytic = doc.get("analytic") or None
    else:
        log = doc
    if not log["forwards"].get("end_ms"):
        raise UnreadableInput(f"{path}: the engine log has no times (record it with the engine timed)")
    return Loaded(from_engine_log(log), source, analytic)


def _inf(value: Any) -> bool:
    return value in ("inf", "Infinity") or (isinstance(value, float) and math.isinf(value))


def _benchmark(path: Path, doc: dict[str, Any]) -> Loaded:
    fmt = "SGLang bench_serving" if "accept_length" in doc or "median_e2e_latency_ms" in doc else "vLLM bench serve"
    source: dict[str, Any] = {"path": str(path), "kind": "serving", "format": fmt, "device": "",
                              "backend": str(doc.get("backend", "")), "model": str(doc.get("model_id", "")),
                              "reported": {k: doc[k] for k in AGGREGATES if isinstance(doc.get(k), (int, float))}}
    notes: list[str] = []
    if not all(isinstance(doc.get(k), list) for k in ("ttfts", "itls")):
        notes.append("per-request records: the file has only aggregates (vLLM: --save-detailed; SGLang: "
                     "--output-details) so no gap can be tied to a prefill")
        return Loaded(Stream(source=fmt, tokens_ms=[], prefills=[], notes=notes), source)
    n = len(doc["ttfts"])
    errors = doc.get("errors") or [""] * n
    ok = [i for i in range(n) if not errors[i] and doc["ttfts"][i]]
    inputs = doc.get("input_lens") or [0] * n
    starts = doc.get("start_times")
    if isinstance(starts, list) and len(starts) == n:
        t0 = min(starts[i] for i in ok) if ok else 0.0
        arrival = {i: (starts[i] - t0) * 1e3 for i in ok}
        placed = True
    elif _inf(doc.get("request_rate", "inf")) and doc.get("max_concurrency") is None:
        arrival = {i: 0.0 for i in ok}
        placed = True
        notes.append("request start times: none in the file; every request taken as sent at 0 (request rate inf, no "
                     "concurrency limit)")
    else:
        arrival = {i: 0.0 for i in ok}
        placed = False
        notes.append("prefill-stall: no request start times (vLLM bench serve --save-detailed writes start_times) and "
                     "requests were not sent at once, so a gap cannot be tied to the prefills inside it")
    tokens = []
    for i in ok:
        t = arrival[i] + doc["ttfts"][i] * 1e3
        times = [t]
        for itl in doc["itls"][i] or []:
            t += itl * 1e3
            times.append(t)
        tokens.append(times)
    prefills = [(tokens[k][0], int(inputs[i])) for k, i in enumerate(ok)] if placed else []
    notes.append("per-step batch composition: not in the file; prefill work is placed at each request's first token "
                 "(a chunked prefill spreads it over the steps before)")
    source["requests"] = {"in_file": n, "succeeded": len(ok)}
    return Loaded(Stream(source=fmt, tokens_ms=tokens, prefills=prefills,
                         arrival_ms=[arrival[i] for i in ok] if placed else None,
                         input_lens=[int(inputs[i]) for i in ok], notes=notes, placed=placed), source)
