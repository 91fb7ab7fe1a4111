"""Record on the GPU machine which kernel family and configuration GemLite runs per batch size.

    record.py gemlite-configs --out DIR [--budget-s 120]

GemLite (gemlite==0.6.0.post2, pure Python Triton kernels; carried as a wheel: scripts/fetch_device_wheels.sh)
picks a kernel family by batch size M (gemlite.core.get_matmul_type: GEMV_REVSPLITK / GEMV_SPLITK,
GEMM_SPLITK, GEMM) and, inside a family, a configuration: from its shipped per-GPU config file
(configs/h100.json, loaded at import, keyed by (M bucket, N, K, group_size, elements_per_sample, type_id))
or, where the file has no entry, by running Triton's autotuner over its "fast" config list on the first
call. For one weight-quantized layer (A16W4: 4-bit weights, group 128, bf16 activations; N=3072,
K=8192: the down projection of Llama-3.2-3B, a shape the file covers) this records, per M:
the family, the M bucket and signature, whether the file had it, the configuration the autotuner
holds after the call (BLOCK sizes, SPLIT_K, warps, stages), how many candidates it timed and for how
long, the layer's time (CUDA-graph do_bench) against bf16 F.linear on the same shape, and at the family
switch points the time of the neighbouring family forced by hand. Also the family and file hit for
every M in 1..4096 from GemLite's own selection code (no kernel run).
Writes DIR/gemlite.json after every step (a time limit keeps what was measured). Any failure
(import, packing, a kernel) is recorded as text in the file, never hidden.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import time
import traceback
from pathlib import Path

N, K, GROUP, NBITS = 3072, 8192, 128, 4
CACHED_MS = (1, 8, 16, 32, 48, 96, 128, 256, 1024, 4096)   # in this order: file hits first (cheap)
MISS_MS = (2, 4, 64)                                       # family switch points the file lacks
FORCED = {2: "GEMM_SPLITK", 4: "GEMM_SPLITK", 64: "GEMM_SPLITK", 48: "GEMM"}


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def config_of(cfg) -> dict:
    d = {k: v for k, v in cfg.kwargs.items()}
    d["num_warps"], d["num_stages"] = cfg.num_warps, cfg.num_stages
    return d


def tuners():
    """Every Triton autotuner of GemLite's five families, by family name."""
    from gemlite.triton_kernels.gemm_kernels import gemm
    from gemlite.triton_kernels.gemm_splitK_kernels import gemm_splitK
    from gemlite.triton_kernels.gemv_kernels import gemv
    from gemlite.triton_kernels.gemv_revsplitK_kernels import gemv_revsplitK
    from gemlite.triton_kernels.gemv_splitK_kernels import gemv_splitK

    out = {}
    for cls in (gemv, gemv_revsplitK, gemv_splitK, gemm_splitK, gemm):
        ks = cls.kernel if isinstance(cls.kernel, (list, tuple)) else [cls.kernel]
        out[cls.matmul_type] = [k for k in ks if hasattr(k, "cache")]
    return out


def snapshot(tz) -> dict:
    return {(fam, i): dict(k.cache) for fam, ks in tz.items() for i, k in enumerate(ks)}


def new_entries(tz, before: dict) -> list[dict]:
    """Autotuner cache entries that appeared since `before`: (family, key, config, candidates timed)."""
    out = []
    for fam, ks in tz.items():
        for i, k in enumerate(ks):
            for key, cfg in k.cache.items():
                if key in before.get((fam, i), {}):
                    continue
                timings = getattr(k, "configs_timings", None) or {}
                cand = []
                for c, t in timings.items():
                    ms = t[0] if isinstance(t, (list, tuple)) else t
                    cand.append({"config": config_of(c), "ms": round(float(ms), 5)})
                out.append({"family": fam, "kernel": getattr(getattr(k, "base_fn", None), "__name__", str(k)),
                            "key": [str(x) for x in key], "config": config_of(cfg), "candidates": len(cand),
                            "candidate_timings": sorted(cand, key=lambda c: c["ms"]),
                            "bench_s": round(float(getattr(k, "bench_time", 0.0) or 0.0), 2)})
    return out


def bench_ms(fn) -> tuple[float, str]:
    import triton

    try:
        return float(triton.testing.do_bench_cudagraph(fn, rep=20)), "do_bench_cudagraph"
    except Exception:  # noqa: BLE001 - a path that cannot be captured: plain do_bench
        return float(triton.testing.do_bench(fn, warmup=5, rep=20)), "do_bench"


def build_layer(dtype):
    """Random W [N, K] quantized HQQ-style (asymmetric 4-bit, group 128 along K) -> GemLite A16W4 layer,
    and the dequantized bf16 weight (the reference)."""
    import torch
    from gemlite.helper import A16W4_HQQ_INT

    gen = torch.Generator(device="cuda").manual_seed(0)
    w = torch.randn(N, K, device="cuda", dtype=torch.float32, generator=gen) / K ** 0.5
    g = w.view(N, K // GROUP, GROUP)
    lo, hi = g.amin(-1, keepdim=True), g.amax(-1, keepdim=True)
    scale = ((hi - lo) / (2 ** NBITS - 1)).clamp(min=1e-8)
    zero = -lo / scale
    wq = (g / scale + zero).round().clamp(0, 2 ** NBITS - 1)
    w_ref = ((wq - zero) * scale).view(N, K).to(dtype)
    layer = A16W4_HQQ_INT(device="cuda:0", dtype=dtype).from_weights(
        wq.view(N, K).to(torch.uint8), scale.view(N, K // GROUP).to(dtype), zero.view(N, K // GROUP).to(dtype))
    return layer, w_ref


def main(argv: list[str], prog: str = "record.py gemlite-configs") -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--budget-s", type=float, default=120.0, help="start no new step after this many seconds")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "gemlite.json"
    t_start = time.perf_counter()
    doc: dict = {"schema": "perflab.gemlite-autotune/1", "date": now(), "python": platform.python_version(),
                 "command": "python3 scripts/record.py gemlite-configs " + " ".join(argv),
                 "layer": {"scheme": "A16W4_HQQ_INT (asymmetric 4-bit weights, per-group scale and zero)",
                           "N": N, "K": K, "group_size": GROUP, "W_nbits": NBITS, "activations": "bfloat16",
                           "origin": "Llama-3.2-3B down projection (8192 -> 3072)", "weights": "random"},
                 "calls": [], "forced": [], "errors": []}

    def save():
        doc["elapsed_s"] = round(time.perf_counter() - t_start, 1)
        path.write_text(json.dumps(doc, indent=1) + "\n")

    try:
        import torch
        import triton

        doc.update(gpu=torch.cuda.get_device_name(0), sms=torch.cuda.get_device_properties(0).multi_processor_count,
                   torch=torch.__version__, triton=triton.__version__)
        import gemlite
        from gemlite import core
        from gemlite.triton_kernels import utils as gl_utils

        doc["gemlite"] = gemlite.__version__
        tag = getattr(core, "selected_tag", None)
        doc["config_file"] = Path(tag).name if tag else None
        cache = core.GEMLITE_TRITON_CONFIG_CACHE
        doc["config_file_entries"] = {fam: len(v) for fam, v in cache.items()}
        dtype = torch.bfloat16
        layer, w_ref = build_layer(dtype)
        meta = layer.get_meta_args()
        e, type_id = int(layer.elements_per_sample), None
        # GemLite's type id for autotuning: fp16 and bf16 share one (core.forward_functional)
        in_dt = core.DType.FP16.value if layer.input_dtype in (core.DType.BF16, core.DType.FP16) else layer.input_dtype.value
        type_id = in_dt * 100 + NBITS
        doc["layer"].update(elements_per_sample=e, type_id=type_id, meta_args=[int(m) for m in meta])
        mx = False

        def signature(m: int) -> str:
            return str((gl_utils.get_closest_m(m), N, K, GROUP, e, type_id))

        # the selection, for every M in 1..4096, by GemLite's own functions (no kernel run)
        sel = []
        for m in range(1, 4097):
            fam = core.get_matmul_type(m, NBITS, mx)
            sel.append([m, fam, gl_utils.get_closest_m(m), signature(m) in cache.get(fam, {})])
        doc["selection"] = {"columns": ["M", "family", "M_bucket", "in_config_file"], "rows": sel}
        save()

        tz = tuners()
        for m in (*CACHED_MS, *MISS_MS):
            if time.perf_counter() - t_start > args.budget_s:
                doc["errors"].append(f"M={m}: skipped, past the {args.budget_s:.0f} s budget")
                continue
            row = {"M": m, "family": core.get_matmul_type(m, NBITS, mx), "M_bucket": gl_utils.get_closest_m(m),
                   "signature": signature(m)}
            row["in_config_file"] = row["signature"] in cache.get(row["family"], {})
            try:
                x = torch.randn(m, K, device="cuda", dtype=dtype)
                before = snapshot(tz)
                t0 = time.perf_counter()
                y = layer(x)
                torch.cuda.synchronize()
                row["first_call_s"] = round(time.perf_counter() - t0, 3)
                ref = torch.nn.functional.linear(x, w_ref)
                row["max_abs_err_vs_dequantized"] = round(float((y.float() - ref.float()).abs().max()), 5)
                row["max_abs_ref"] = round(float(ref.float().abs().max()), 5)
                found = new_entries(tz, before)
                row["tuned_now"] = found
                used = [f for f in found if f["family"] == row["family"]]
                if used:
                    row["config"], row["kernel"] = used[0]["config"], used[0]["kernel"]
                    row["candidates"], row["autotune_s"] = used[0]["candidates"], used[0]["bench_s"]
                    row["source"] = "config file" if row["in_config_file"] else "autotuned on first call"
                row["gemlite_ms"], row["timer"] = bench_ms(lambda: layer(x))
                row["bf16_ms"], _ = bench_ms(lambda: torch.nn.functional.linear(x, w_ref))
                row["speedup_vs_bf16"] = round(row["bf16_ms"] / row["gemlite_ms"], 3)
            except Exception as exc:  # noqa: BLE001
                row["error"] = f"{type(exc).__name__}: {str(exc)[:400]}"
                traceback.print_exc()
            doc["calls"].append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "tuned_now"}), flush=True)
            save()

        for m, fam in FORCED.items():
            if time.perf_counter() - t_start > args.budget_s:
                doc["errors"].append(f"forced {fam} at M={m}: skipped, past the budget")
                continue
            row = {"M": m, "family": fam, "signature": signature(m)}
            row["in_config_file"] = row["signature"] in cache.get(fam, {})
            try:
                x = torch.randn(m, K, device="cuda", dtype=dtype)
                before = snapshot(tz)
                layer.forward_manual(x, fam)
                torch.cuda.synchronize()
                used = [f for f in new_entries(tz, before) if f["family"] == fam]
                if used:
                    row["config"], row["candidates"] = used[0]["config"], used[0]["candidates"]
                row["gemlite_ms"], row["timer"] = bench_ms(lambda: layer.forward_manual(x, fam))
            except Exception as exc:  # noqa: BLE001
                row["error"] = f"{type(exc).__name__}: {str(exc)[:400]}"
            doc["forced"].append(row)
            print(json.dumps(row), flush=True)
            save()
    except Exception as exc:  # noqa: BLE001 - gemlite does not import or run: the error is the record
        doc["errors"].append(f"{type(exc).__name__}: {str(exc)[:600]}")
        traceback.print_exc()
    save()
    return 0
