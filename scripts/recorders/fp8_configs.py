"""Measure the fp8 weight-only configurations of the fp8-weight-only puzzle on the GPU machine.

    record.py fp8-configs --out DIR [--layers 28] [--new-tokens 32] [--linear CONFIGS]
    record.py fp8-configs --worker CONFIG --out DIR      (one configuration, what the parent runs)

A Llama-3.2-3B-shaped decoder (perflab/workloads/llama.py, random weights), batch 1, bf16 activations,
under each configuration: none (bf16), torchao Float8WeightOnlyConfig, torchao
Float8DynamicActivationFloat8WeightConfig (when torchao imports), perflab's dequantize-then-matmul fp8
path (the puzzle's slow workload) and the puzzle's fused Triton solution.

ONE FRESH PROCESS PER CONFIGURATION: the parent starts `--worker CONFIG` for each, with a time limit,
so no configuration's peak memory contains what an earlier one left in the caching allocator
(torch.cuda.reset_peak_memory_stats resets the peaks, not the blocks an earlier model still holds).
Per configuration: decode ms and tok/s of one token at a fixed position (eager, and replayed as one
CUDA graph: the compiled-decode analogue), generate tok/s (eager: prefill 8 tokens + --new-tokens new
tokens, new tokens / total time), weight bytes, achieved weight bandwidth (weight bytes x decode tok/s),
peak memory while loading + quantizing (from process start) and during inference (peaks reset after
loading), allocated and reserved. Optionally a single nn.Linear(8192, 8192) for M in 1, 16, 256
for the configurations named in --linear.
Writes DIR/configs.json (rewritten after each configuration, so a timeout keeps what was measured)
and DIR/row-CONFIG.json per worker.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import subprocess
import time
from pathlib import Path

from recorders.common import REPO, record_py

import torch  # noqa: E402

from perflab.puzzles.engine.runner import load_module  # noqa: E402
from perflab.workloads import fp8, llama  # noqa: E402

MB = 1024.0 * 1024.0
SOLUTION = REPO / "src/perflab/catalog/40-fp8-weight-only/solution.py"


def bench_ms(fn, iters: int = 10, repeats: int = 5) -> float:
    """Median over `repeats` of the mean time of `iters` back-to-back calls (CUDA events)."""
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(iters):
            fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) / iters)
    return statistics.median(out)


def torchao_config(name: str):
    from torchao.quantization import (Float8DynamicActivationFloat8WeightConfig, Float8WeightOnlyConfig,
                                      quantize_)

    cfg = Float8WeightOnlyConfig() if name == "torchao-float8wo" else Float8DynamicActivationFloat8WeightConfig()
    return quantize_, cfg


def apply(model, name: str):
    if name == "bf16":
        return model
    if name.startswith("torchao-"):
        quantize_, cfg = torchao_config(name)
        quantize_(model, cfg)
        return model
    if name == "perflab-dequant":
        return llama.swap_linears(model, fp8.make_dequant_linear)
    if name == "perflab-fused":
        sol = load_module(SOLUTION)
        return llama.swap_linears(model, sol.make_linear)
    raise ValueError(name)


def measure_model(name: str, cfg: dict, new_tokens: int = 32) -> dict:
    """Decode of one token at a fixed position: eager, and replayed as one CUDA graph (what gpt-fast's
    compiled decode does with mode="reduce-overhead"); generate = prefill 8 + `new_tokens` new tokens, eager.
    Meant to run first thing in a fresh process (the worker): the load peaks count from process start."""
    pos = 32
    model = apply(llama.build(cfg, "cuda", 0, max_seq=max(64, 8 + new_tokens)), name)
    torch.cuda.synchronize()
    row = {"config": name, "process": "fresh", "load_peak_allocated_mb": round(torch.cuda.max_memory_allocated() / MB, 1),
           "load_peak_reserved_mb": round(torch.cuda.max_memory_reserved() / MB, 1)}
    tok = torch.tensor([[7]], device="cuda")
    with torch.no_grad():  # one call first: a Triton autotuner's benchmark buffers are not the inference's memory
        model(tok, pos)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    row.update({"weights_mb": round(torch.cuda.memory_allocated() / MB, 1), "weight_bytes": llama.weight_bytes(model),
                "reserved_before_mb": round(torch.cuda.memory_reserved() / MB, 1), "new_tokens": new_tokens})
    torch.cuda.reset_peak_memory_stats()
    prompt = torch.arange(8, device="cuda")[None] + 100
    with torch.no_grad():
        ms = bench_ms(lambda: model(tok, pos), iters=5, repeats=3)
        row["eager_decode_ms"] = round(ms, 3)
        row["eager_decode_tok_s"] = round(1e3 / ms, 2)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        model(prompt, 0)
        for i in range(new_tokens):
            model(tok, 8 + i)
        torch.cuda.synchronize()
        row["eager_generate_tok_s"] = round(new_tokens / (time.perf_counter() - t0), 2)
        row["eager_peak_allocated_mb"] = round(torch.cuda.max_memory_allocated() / MB, 1)
        row["eager_peak_reserved_mb"] = round(torch.cuda.max_memory_reserved() / MB, 1)
    try:
        graph, _ = llama.capture_decode(model, tok, pos)
        gms = bench_ms(graph.replay, iters=20, repeats=5)
        row["graph_decode_ms"] = round(gms, 4)
        row["graph_decode_tok_s"] = round(1e3 / gms, 2)
        row["graph_weight_gbps"] = round(row["weight_bytes"] * 1e3 / gms / 1e9, 1)
        row["graph_peak_allocated_mb"] = round(torch.cuda.max_memory_allocated() / MB, 1)
        row["graph_peak_reserved_mb"] = round(torch.cuda.max_memory_reserved() / MB, 1)
        row["graph_pool_mb"] = round((torch.cuda.memory_reserved() - row["weights_mb"] * MB) / MB, 1)
        del graph
    except Exception as exc:  # record, do not stop the table
        row["graph_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    row["eager_weight_gbps"] = round(row["weight_bytes"] * row["eager_decode_tok_s"] / 1e9, 1)
    del model
    return row


def measure_linear(name: str, ms_list=(1, 16, 256, 4096), compile_m1: bool = True) -> dict:
    torch.cuda.empty_cache()
    lin = torch.nn.Sequential(torch.nn.Linear(8192, 8192, bias=False, device="cuda", dtype=torch.bfloat16))
    lin = apply(lin, name)
    row = {"config": name}
    with torch.inference_mode():
        for m in ms_list:
            x = torch.randn(m, 8192, device="cuda", dtype=torch.bfloat16)
            row[f"M{m}_ms"] = round(bench_ms(lambda: lin(x), iters=20), 4)
        if compile_m1 and name.startswith("torchao-"):
            try:
                c = torch.compile(lin)
                x = torch.randn(1, 8192, device="cuda", dtype=torch.bfloat16)
                row["M1_compiled_ms"] = round(bench_ms(lambda: c(x), iters=20), 4)
            except Exception as exc:
                row["compile_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    torch._dynamo.reset()
    return row


def worker(name: str, out: Path, cfg: dict, new_tokens: int, linear: bool) -> int:
    """One configuration in this (fresh) process: the model first (clean load peaks), then the linear."""
    row = measure_model(name, cfg, new_tokens)
    (out / f"row-{name}.json").write_text(json.dumps(row, indent=1))
    print(json.dumps(row), flush=True)
    if linear:
        torch.cuda.empty_cache()
        lin = measure_linear(name, ms_list=(1, 16, 256))  # M=4096 is no GEMV shape (and costs seconds)
        (out / f"linear-{name}.json").write_text(json.dumps(lin, indent=1))
        print(json.dumps(lin), flush=True)
    return 0


def run_worker(name: str, args: argparse.Namespace) -> tuple[dict, dict | None]:
    """Start a fresh Python process for one configuration; its rows, or the error it ended with."""
    cmd = [*record_py("fp8-configs", "--worker", name, "--out", args.out, "--layers", args.layers,
                      "--new-tokens", args.new_tokens)]
    if name in args.linear.split(","):
        cmd.append("--with-linear")
    row_file, lin_file = args.out / f"row-{name}.json", args.out / f"linear-{name}.json"
    for stale in (row_file, lin_file):  # a worker that dies must not be read as an earlier run's row
        stale.unlink(missing_ok=True)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.worker_timeout)
        rc, tail = proc.returncode, (proc.stdout + proc.stderr)[-600:]
    except subprocess.TimeoutExpired as exc:
        rc, tail = "timeout", f"no result within {args.worker_timeout} s ({str(exc.stderr or '')[-300:]})"
    wall = round(time.perf_counter() - t0, 1)
    row = json.loads(row_file.read_text()) if row_file.is_file() else {"config": name, "error": f"worker {rc}: {tail}"}
    row["worker_wall_s"] = wall
    lin = json.loads(lin_file.read_text()) if lin_file.is_file() else None
    print(f"{name}: rc {rc}, {wall} s", flush=True)
    return row, lin


def main(argv: list[str], prog: str = "record.py fp8-configs") -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--new-tokens", type=int, default=32, help="new tokens of the eager generate")
    ap.add_argument("--configs", default="bf16,torchao-float8wo,torchao-float8dq,perflab-dequant,perflab-fused")
    ap.add_argument("--linear", default="", help="configs whose nn.Linear(8192, 8192) row to measure too")
    ap.add_argument("--worker-timeout", type=float, default=90.0, help="seconds per configuration's process")
    ap.add_argument("--worker", default="", help=argparse.SUPPRESS)
    ap.add_argument("--with-linear", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    cfg = dict(llama.LLAMA_3_2_3B, layers=args.layers)
    if args.worker:
        return worker(args.worker, args.out, cfg, args.new_tokens, args.with_linear)
    try:
        import torchao
        tao = torchao.__version__
    except Exception as exc:
        tao = f"not importable: {type(exc).__name__}: {exc}"
    doc = {"schema": "perflab.fp8-configs/2", "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "torchao": tao, "python": platform.python_version(),
           "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "command": "python3 scripts/record.py fp8-configs " + " ".join(argv),
           "method": "one fresh process per configuration (model_rows[*].process)",
           "model": {"shape": "Llama-3.2-3B", **cfg, "batch": 1, "dtype": "bfloat16", "weights": "random"},
           "linear_8192": [], "model_rows": []}
    path = args.out / "configs.json"
    for name in args.configs.split(","):
        row, lin = run_worker(name, args)
        doc["model_rows"].append(row)
        if lin is not None:
            doc["linear_8192"].append(lin)
        path.write_text(json.dumps(doc, indent=1))
    return 0

