"""Shared plumbing of the kernel-level prototypes (proto/*.py): CUDA-event timing, the correctness
check, the single-launch Nsight Compute mode and the command line every prototype takes.

Each prototype module defines:
    NAME                         the kernel-name regex ncu profiles (``-k regex:NAME``)
    VARIANTS                     variant names; "slow" and "fast" always, others are extra references
    setup(device, seed, **size)  -> state (inputs built from the seed, outputs allocated)
    run(state, variant)          -> output tensor(s) of one step of that variant
    main_kernel(state, variant)  one launch of the variant's main kernel (what ncu profiles)
    SIZES                        {label: size kwargs} for the sweep; DEFAULT: the label of the puzzle size
    TOL                          (rtol, atol) of torch.allclose between slow and every other variant
and optionally reference(state) -> what every variant must return (checked with TOL too).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable


def cuda_times_ms(fn: Callable[[], Any], *, warmup: int = 5, reps: int = 30) -> list[float]:
    """Per-call times in ms from CUDA events around each call, after `warmup` untimed calls."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def interleaved_ms(fns: dict[str, Callable[[], Any]], *, warmup: int = 5, reps: int = 30) -> dict[str, list[float]]:
    """Time several variants round-robin (one call of each per round), so drift hits them alike."""
    import torch

    for fn in fns.values():
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    out: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            out[name].extend(cuda_times_ms(fn, warmup=0, reps=1))
    return out


def _flat(x: Any) -> list:
    return list(x) if isinstance(x, (tuple, list)) else [x]


def compare(ref: Any, got: Any, rtol: float, atol: float) -> dict:
    """allclose of every output tensor, with the worst relative error (for the notes)."""
    import torch

    ok, worst = True, 0.0
    for a, b in zip(_flat(ref), _flat(got)):
        a, b = a.float(), b.float()
        if not torch.isfinite(b).all():
            return {"ok": False, "max_rel_err": float("inf")}
        ok &= bool(torch.allclose(b, a, rtol=rtol, atol=atol))
        worst = max(worst, float(((b - a).norm() / a.norm().clamp_min(1e-30)).item()))
    return {"ok": ok, "max_rel_err": worst}


def poison(x: Any) -> None:
    """Fill output buffers with NaN so an element a variant forgets to write fails the check."""
    for t in _flat(x):
        if t is not None and t.is_floating_point():
            t.fill_(float("nan"))


def measure(mod: Any, size_label: str, *, seed: int, reps: int, variants: list[str]) -> dict:
    import torch

    state = mod.setup("cuda", seed, **mod.SIZES[size_label])
    rtol, atol = mod.TOL
    checks = {}
    ref = None
    if hasattr(mod, "reference"):
        ref = mod.reference(state)
    outs, errors = {}, {}
    for v in variants:
        if "out" in state:
            poison(state["out"])
        try:
            got = mod.run(state, v)
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - one variant that does not compile must not cost the others
            errors[v] = f"{type(exc).__name__}: {str(exc)[:400]}"
            print(f"  {v} failed: {errors[v]}", flush=True)
            continue
        outs[v] = [t.clone() for t in _flat(got)]
    ok_variants = [v for v in variants if v in outs]
    base = ref if ref is not None else outs.get("slow")
    for v in ok_variants:
        checks[v] = compare(base, outs[v], rtol, atol) if base is not None else {"ok": None}
    del outs
    times = interleaved_ms({v: (lambda v=v: mod.run(state, v)) for v in ok_variants}, reps=reps)
    med = {v: statistics.median(t) for v, t in times.items()}
    row = {"size": size_label, "params": mod.SIZES[size_label], "median_ms": med, "samples_ms": times,
           "check": checks, "errors": errors,
           "speedup_fast": med["slow"] / med["fast"] if med.get("fast") and med.get("slow") else None}
    if hasattr(mod, "notes"):
        row["notes"] = mod.notes(state)
    del state
    torch.cuda.empty_cache()
    return row


def ncu_launch(mod: Any, variant: str, *, seed: int, size_label: str) -> None:
    """Warm up (compile, caches), then exactly one launch of the main kernel between cudaProfilerStart/Stop:
    run under `ncu --profile-from-start off` (plus -k regex:NAME -c 1) it is the only kernel profiled."""
    import torch

    state = mod.setup("cuda", seed, **mod.SIZES[size_label])
    for _ in range(2):
        mod.run(state, variant)
        mod.main_kernel(state, variant)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    mod.main_kernel(state, variant)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


def main(mod: Any, argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(mod.__doc__ or "").split("\n\n")[0])
    ap.add_argument("--variant", choices=list(mod.VARIANTS), help="with --ncu: the variant to profile")
    ap.add_argument("--ncu", action="store_true", help="one launch of the main kernel between cudaProfilerStart/Stop")
    ap.add_argument("--size", default=None, help=f"one of {list(mod.SIZES)} (default: {mod.DEFAULT})")
    ap.add_argument("--sweep", action="store_true", help="time every size, not only the default")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--json", default=None, help="write the measurements here")
    args = ap.parse_args(argv)
    size = args.size or mod.DEFAULT
    if args.ncu:
        ncu_launch(mod, args.variant or "slow", seed=args.seed, size_label=size)
        print("ok")
        return 0
    import torch

    labels = list(mod.SIZES) if args.sweep else [size]
    variants = [args.variant] if args.variant else list(mod.VARIANTS)
    if args.variant and args.variant != "slow":
        variants = ["slow", args.variant]
    rows = []
    for label in labels:
        t0 = time.time()
        try:
            row = measure(mod, label, seed=args.seed, reps=args.reps, variants=variants)
        except Exception as exc:  # noqa: BLE001 - a size that fails (memory, compile) must not cost the others
            print(f"{Path(mod.__file__).stem} [{label}] failed: {type(exc).__name__}: {str(exc)[:400]}", flush=True)
            rows.append({"size": label, "error": f"{type(exc).__name__}: {str(exc)[:400]}"})
            torch.cuda.empty_cache()
            continue
        row["wall_s"] = round(time.time() - t0, 2)
        rows.append(row)
        meds = "  ".join(f"{v}={row['median_ms'][v]:.4f}ms{'' if row['check'][v]['ok'] else '(WRONG)'}"
                         for v in row["median_ms"])
        sp = f"  slow/fast={row['speedup_fast']:.2f}x" if row["speedup_fast"] else ""
        print(f"{Path(mod.__file__).stem} [{label}] {meds}{sp}", flush=True)
    result = {"prototype": Path(mod.__file__).stem, "device": torch.cuda.get_device_name(),
              "torch": torch.__version__, "default_size": mod.DEFAULT, "rows": rows}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0 if all("error" not in r and not r["errors"] and all(c["ok"] for c in r["check"].values())
                    for r in rows) else 1


if __name__ == "__main__":
    sys.exit("run a prototype, e.g. python3 proto/warp_specialization.py")
