"""`perflab bench`: the machine's ceilings (bandwidths, matmul rates, latencies), saved with a manifest.

`run_bench(quick)` measures; `save_ceilings` / `load_ceilings` (analysis/work/saved_ceilings.py) keep them in
`perflab.paths.user_data_dir()/ceilings.json`, where the roofline and the doctor find them.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from perflab.errors import NeedsGPU

from perflab.analysis.work.saved_ceilings import (  # noqa: F401 (where the ceilings are kept: bench's API too)
    CEILINGS_FILE,
    SCHEMA,
    ceilings_path,
    load_ceilings,
    save_ceilings,
)


def require_gpu() -> None:
    try:
        import torch
    except ImportError:
        raise NeedsGPU("perflab bench needs PyTorch with CUDA and an NVIDIA GPU: pip install torch") from None
    if not torch.cuda.is_available():
        raise NeedsGPU("perflab bench needs an NVIDIA GPU and none is visible (torch.cuda.is_available() is False)")


def run_bench(quick: bool = False, progress: Callable[[str], None] | None = None,
              disk_dir: Path | None = None) -> dict:
    """Measure every ceiling; one failing measurement is recorded as {"error": ...}, not raised."""
    require_gpu()
    from perflab.paths import user_data_dir
    from perflab.toolkit.bench import suite
    from perflab.toolkit.bench.manifest import manifest

    plan = suite.QUICK if quick else suite.FULL
    say = progress or (lambda _msg: None)
    results: dict[str, dict] = {}
    t0 = time.perf_counter()
    man = manifest("quick" if quick else "full")

    def attempt(label: str, fn: Callable[[], dict], many: bool = False) -> None:
        say(label)
        try:
            got = fn()
            results.update(got if many else {label: got})
        except Exception as exc:
            results[label] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"}

    kernels = None
    try:
        kernels = suite.CupyKernels()
    except Exception as exc:
        for key in ("dram_copy", "dram_read_smem", "l2_read", "launch_latency"):
            results[key] = {"error": f"custom kernels unavailable (CuPy): {type(exc).__name__}: {exc}"[:240]}
    if kernels is not None:
        attempt("dram_copy", lambda: suite.dram_copy(kernels, plan))
        attempt("dram_read_smem", lambda: suite.dram_read_smem(kernels, plan))
        attempt("l2_read", lambda: suite.l2_read(kernels, plan))
        attempt("launch_latency", lambda: suite.launch_latency(kernels, plan))
    attempt("torch_launch_latency", lambda: suite.torch_launch(plan))
    attempt("graph_replay_per_kernel", lambda: suite.graph_replay(plan))
    attempt("host_copies", lambda: suite.host_copies(plan), many=True)
    attempt("matmul", lambda: suite.matmuls(plan), many=True)
    attempt("disk", lambda: suite.disk(plan, disk_dir or user_data_dir() / "bench-tmp"), many=True)
    if _gpu_count() > 1:  # several GPUs: the all-reduce bus bandwidth joins (torchrun, one process per GPU)
        attempt("allreduce_busbw", lambda: _allreduce_ceiling(quick, user_data_dir() / "allreduce.json"))
    if "dram_copy" in results and "value" in results["dram_copy"] and "value" in results.get("dram_read_smem", {}):
        results["dram_read_smem"]["pct_of_copy"] = round(
            100 * results["dram_read_smem"]["value"] / results["dram_copy"]["value"], 1)
    man["clocks_after"] = man.get("clocks_mhz") and _clocks_now()
    man["seconds"] = round(time.perf_counter() - t0, 1)
    return {"schema": SCHEMA, "manifest": man, "results": results}


def _gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _allreduce_ceiling(quick: bool, out: Path) -> dict:
    from perflab.toolkit.bench.allreduce import run_allreduce_bench

    doc = run_allreduce_bench(_gpu_count(), out, max_bytes=(1 << 28) if quick else (1 << 30),
                              target_s=0.02 if quick else 0.05)
    best = max(doc["rows"], key=lambda r: r["busbw_gbps"])
    return {"value": round(best["busbw_gbps"], 2), "unit": "GB/s", "world_size": doc["world_size"],
            "method": f"all_reduce busbw (nccl-tests formula), {doc['world_size']} GPUs, float32, best at "
                      f"{best['bytes'] >> 20} MiB; sweep in {out}", "rows": doc["rows"]}


def _clocks_now() -> dict | None:
    from perflab.toolkit.bench.manifest import nvml_facts

    return nvml_facts().get("clocks_mhz")


def table_rows(data: dict) -> list[tuple[str, str, str]]:
    """(ceiling, value, how) rows for display, in the order measured."""
    rows = []
    for key, res in data["results"].items():
        if "error" in res:
            rows.append((key, "n/a", res["error"]))
        else:
            extra = f" ({res['pct_of_copy']} % of copy)" if "pct_of_copy" in res else ""
            rows.append((key, f"{res['value']:,.2f} {res['unit']}", res["method"] + extra))
    return rows
