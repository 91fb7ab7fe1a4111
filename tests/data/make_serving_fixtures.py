"""Writes the serving-benchmark fixtures of tests/doctor/test_serving_doctor.py (run from the repo root:
python3 tests/data/make_serving_fixtures.py). A small simulated server (a decode step of DECODE_S for every
running request, a prefill costing PER_TOKEN_S per prompt token, whole or in chunks of CHUNK tokens riding
along with the decodes) serves 12 requests; the files are laid out as the benchmarks write them:

- vLLM `vllm bench serve --save-result --save-detailed` (vllm/benchmarks/serve.py: result_json = date, backend,
  label, model_id, tokenizer_id, num_prompts, request_rate ("inf" or a number), burstiness, max_concurrency, then
  the benchmark's result: duration, completed, failed, total_input_tokens, ..., input_lens, output_lens, ttfts,
  itls, latencies, start_times, queue_times, generated_texts, errors, ..., mean/median/std/pNN _ttft/_tpot/_itl
  /_e2el _ms; times in seconds per request, ms in the aggregates); without --save-detailed the per-request
  lists are removed;
- SGLang `python -m sglang.bench_serving --output-file X.jsonl --output-details` (python/sglang/bench_serving.py:
  one JSON line per run, appended: backend, dataset_name, request_rate, ..., the aggregates, and with
  --output-details input_lens, output_lens, ttfts, itls, generated_texts, errors; no start times).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

DECODE_S, PER_TOKEN_S, CHUNK = 0.020, 0.00005, 256
HERE = Path(__file__).parent


def simulate(arrivals: list[float], prompts: list[int], outputs: list[int], chunked: bool) -> dict:
    n = len(arrivals)
    t, running, filling, queue = 0.0, [], None, []
    tokens: list[list[float]] = [[] for _ in range(n)]
    done_prefill = [0] * n
    pending = sorted(range(n), key=lambda r: arrivals[r])
    while any(len(tokens[r]) < outputs[r] for r in range(n)):
        while pending and arrivals[pending[0]] <= t + 1e-12:
            queue.append(pending.pop(0))
        if not running and filling is None and not queue:
            t = arrivals[pending[0]]
            continue
        decoding = [r for r in running if len(tokens[r]) < outputs[r]]
        if not chunked and queue:                 # a whole prompt in one step: every decode waits
            r = queue.pop(0)
            t += prompts[r] * PER_TOKEN_S + 0.002
            tokens[r].append(t)
            running.append(r)
            continue
        if chunked and filling is None and queue:
            filling = queue.pop(0)
        cost = DECODE_S if decoding else 0.002
        if chunked and filling is not None:
            take = min(CHUNK, prompts[filling] - done_prefill[filling])
            cost += take * PER_TOKEN_S
            done_prefill[filling] += take
        t += cost
        for r in decoding:
            tokens[r].append(t)
        if chunked and filling is not None and done_prefill[filling] == prompts[filling]:
            tokens[filling].append(t)
            running.append(filling)
            filling = None
    return {"tokens": tokens}


def metrics(arrivals, prompts, outputs, tokens, t0=0.0) -> dict:
    ttfts = [tok[0] - a for tok, a in zip(tokens, arrivals)]
    itls = [list(np.diff(tok)) for tok in tokens]
    lat = [tok[-1] - a for tok, a in zip(tokens, arrivals)]
    tpots = [(tok[-1] - tok[0]) / (len(tok) - 1) for tok in tokens if len(tok) > 1]
    flat = [x for i in itls for x in i]
    dur = max(tok[-1] for tok in tokens)
    out = {"duration": dur, "completed": len(tokens), "failed": 0, "total_input_tokens": sum(prompts),
           "total_output_tokens": sum(outputs), "request_throughput": len(tokens) / dur,
           "request_goodput": None, "output_throughput": sum(outputs) / dur,
           "total_token_throughput": (sum(prompts) + sum(outputs)) / dur,
           "input_lens": prompts, "output_lens": outputs, "ttfts": ttfts, "itls": itls, "latencies": lat,
           "start_times": [t0 + a for a in arrivals], "queue_times": [0.0] * len(tokens),
           "generated_texts": [" x" * o for o in outputs], "errors": [""] * len(tokens),
           "max_output_tokens_per_s": 0.0, "max_concurrent_requests": len(tokens), "rtfx": 0.0}
    for name, values in (("ttft", ttfts), ("tpot", tpots), ("itl", flat), ("e2el", lat)):
        out[f"mean_{name}_ms"] = float(np.mean(values)) * 1e3
        out[f"median_{name}_ms"] = float(np.median(values)) * 1e3
        out[f"std_{name}_ms"] = float(np.std(values)) * 1e3
        out[f"p99_{name}_ms"] = float(np.percentile(values, 99)) * 1e3
    return out


def stream():
    rng = np.random.default_rng(0)
    arrivals = [0.0] + list(np.cumsum(rng.uniform(0.25, 0.45, 11)))
    prompts = [int(x) for x in rng.choice([512, 2048, 4096], 12)]
    outputs = [int(x) for x in rng.integers(24, 64, 12)]
    return [float(a) for a in arrivals], prompts, outputs


def vllm(chunked: bool, detailed: bool = True) -> dict:
    arrivals, prompts, outputs = stream()
    tokens = simulate(arrivals, prompts, outputs, chunked)["tokens"]
    head = {"date": "20261127-120000", "endpoint_type": "vllm", "backend": "vllm", "label": None,
            "model_id": "meta-llama/Llama-3.1-8B-Instruct", "tokenizer_id": "meta-llama/Llama-3.1-8B-Instruct",
            "num_prompts": 12, "request_rate": 3.0, "burstiness": 1.0, "max_concurrency": None}
    doc = {**head, **metrics(arrivals, prompts, outputs, tokens, t0=81234.5)}
    if not detailed:
        for k in ("input_lens", "output_lens", "start_times", "ttfts", "itls", "generated_texts", "errors"):
            del doc[k]
    return doc


def sglang() -> str:
    arrivals, prompts, outputs = stream()
    arrivals = [0.0] * len(arrivals)           # request rate inf: every request sent at once
    tokens = simulate(arrivals, prompts, outputs, chunked=False)["tokens"]
    m = metrics(arrivals, prompts, outputs, tokens)
    head = {"backend": "sglang", "dataset_name": "random", "request_rate": float("inf"), "max_concurrency": None,
            "sharegpt_output_len": None, "random_input_len": 4096, "random_output_len": 64,
            "random_range_ratio": 0.0}
    agg = {"duration": m["duration"], "completed": m["completed"], "total_input_tokens": m["total_input_tokens"],
           "total_output_tokens": m["total_output_tokens"], "total_output_tokens_retokenized": m["total_output_tokens"],
           "request_throughput": m["request_throughput"], "input_throughput": m["total_input_tokens"] / m["duration"],
           "output_throughput": m["output_throughput"], "mean_e2e_latency_ms": m["mean_e2el_ms"],
           "median_e2e_latency_ms": m["median_e2el_ms"], "std_e2e_latency_ms": m["std_e2el_ms"],
           "p99_e2e_latency_ms": m["p99_e2el_ms"], **{k: m[k] for k in m if k.endswith(("_ttft_ms", "_tpot_ms"))},
           "mean_itl_ms": m["mean_itl_ms"], "median_itl_ms": m["median_itl_ms"], "std_itl_ms": m["std_itl_ms"],
           "p95_itl_ms": float(np.percentile([x for i in m["itls"] for x in i], 95)) * 1e3,
           "p99_itl_ms": m["p99_itl_ms"], "concurrency": 4.2, "accept_length": None}
    details = {k: m[k] for k in ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors")}
    earlier = {**head, "request_rate": 2.0, **agg}      # an earlier run appended to the same file, no details
    return json.dumps(earlier) + "\n" + json.dumps({**head, **agg, **details}) + "\n"


if __name__ == "__main__":
    (HERE / "vllm_bench_serve_whole_prefill.json").write_text(json.dumps(vllm(False), indent=2))
    (HERE / "vllm_bench_serve_chunked_prefill.json").write_text(json.dumps(vllm(True), indent=2))
    (HERE / "vllm_bench_serve_aggregates_only.json").write_text(json.dumps(vllm(False, detailed=False), indent=2))
    (HERE / "sglang_bench_serving.jsonl").write_text(sglang())
