"""All-reduce bus bandwidth over a size sweep, like nccl-tests' all_reduce_perf.

Launched under torchrun (one process per GPU, multi-node through torchrun's rendezvous):

    python -m torch.distributed.run --nproc-per-node 2 -m perflab.toolkit.bench.allreduce --out ar.json
    perflab bench --allreduce [--gpus N]        # does the same, and prints the table

For each message size (bytes of one float32 buffer): warm up, then time `iters` back-to-back
all_reduce calls (CUDA events; on the CPU with gloo, perf_counter); the time of one call is the
slowest rank's mean (nccl-tests reports the same). algbw = size / time, busbw = algbw * 2(n-1)/n.
Rank 0 writes the JSON (schema perflab.allreduce/1) with a manifest of the machine.
"""
from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable

from perflab.errors import PerflabError
from perflab.toolkit.bench.torchrun_sweep import launch, run_worker, size_args, worker_args

SCHEMA = "perflab.allreduce/1"
DEFAULT_MIN, DEFAULT_MAX = 1 << 10, 1 << 30


def sizes(min_bytes: int, max_bytes: int, factor: int = 4) -> list[int]:
    if min_bytes < 4 or max_bytes < min_bytes or factor < 2:
        raise PerflabError(f"bad size sweep {min_bytes}..{max_bytes} x{factor} (need 4 <= min <= max, factor >= 2)")
    out, s = [], min_bytes
    while s <= max_bytes:
        out.append(s)
        s *= factor
    return out


def bus_bandwidth(size: int, seconds: float, n: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s for one all-reduce of `size` bytes among n ranks."""
    alg = size / seconds / 1e9 if seconds > 0 else 0.0
    return alg, alg * 2.0 * (n - 1) / n


def _time_one(dist: Any, torch: Any, call: Callable[[], Any], iters: int, cuda: bool) -> float:
    """Mean seconds per call on this rank."""
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        dist.barrier()
        start.record()
        for _ in range(iters):
            call()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / iters
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        call()
    return (time.perf_counter() - t0) / iters


def time_calls(call: Callable[[], Any], *, warmup: int, target_s: float, cuda: bool, device: Any,
               iters: int = 20) -> tuple[float, int]:
    """(seconds per call: the slowest rank's mean, calls timed): about target_s of back-to-back calls, the
    same count on every rank."""
    import torch
    import torch.distributed as dist

    for _ in range(warmup):
        call()
    probe = _time_one(dist, torch, call, 2, cuda)
    k = max(1, min(iters * 50, int(target_s / max(probe, 1e-7))))
    k = torch.tensor([k], device=device)
    dist.all_reduce(k, op=dist.ReduceOp.MIN)  # same count everywhere
    t = torch.tensor([_time_one(dist, torch, call, int(k.item()), cuda)], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item()), int(k.item())


def measure(size_list: Sequence[int], *, warmup: int = 5, iters: int = 20, target_s: float = 0.05) -> dict:
    """Run inside an initialized process group; every rank returns the same rows."""
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available() and dist.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    n = dist.get_world_size()
    rows = []
    for size in size_list:
        buf = torch.ones(max(size // 4, 1), dtype=torch.float32, device=device)
        seconds, k = time_calls(lambda: dist.all_reduce(buf), warmup=warmup, target_s=target_s, cuda=cuda,
                                device=device, iters=iters)
        alg, bus = bus_bandwidth(buf.numel() * 4, seconds, n)
        rows.append({"bytes": buf.numel() * 4, "iters": k, "time_us": seconds * 1e6,
                     "algbw_gbps": alg, "busbw_gbps": bus})
        del buf
    return {"world_size": n, "backend": dist.get_backend(), "dtype": "float32", "op": "sum", "rows": rows,
            "peak_busbw_gbps": max(r["busbw_gbps"] for r in rows) if rows else None}


def _manifest(cuda: bool) -> dict:
    import datetime as dt
    import platform
    import socket

    import torch

    import perflab

    m = {"torch": torch.__version__, "python": platform.python_version(), "perflab": perflab.__version__,
         "host": socket.gethostname(), "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
         "nccl_nvls_enable": os.environ.get("NCCL_NVLS_ENABLE"), "device": "cuda" if cuda else "cpu",
         "nnodes": os.environ.get("GROUP_WORLD_SIZE"), "local_world_size": os.environ.get("LOCAL_WORLD_SIZE")}
    if cuda:
        from perflab.toolkit.bench.manifest import nvml_facts

        m.update(gpu=torch.cuda.get_device_name(0), cc="{}.{}".format(*torch.cuda.get_device_capability(0)),
                 cuda=torch.version.cuda, gpus_visible=torch.cuda.device_count())
        try:
            m["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except (AttributeError, RuntimeError, TypeError):
            m["nccl"] = None
        m.update(nvml_facts(torch.cuda.current_device()))
    return m


def worker_main(argv: Sequence[str] | None = None) -> int:
    """The torchrun worker: every rank measures, rank 0 writes --out."""
    args = worker_args("all-reduce bus bandwidth (run under torchrun)", argv, min_bytes=DEFAULT_MIN,
                       max_bytes=DEFAULT_MAX)

    def document(cuda: bool):
        result = measure(sizes(args.min_bytes, args.max_bytes, args.factor), target_s=args.target_s)
        return lambda: {"schema": SCHEMA, "manifest": _manifest(cuda), **result}

    return run_worker(args.out, document)


def run_allreduce_bench(nproc: int, out: Path, *, min_bytes: int = DEFAULT_MIN, max_bytes: int = DEFAULT_MAX,
                        factor: int = 4, target_s: float = 0.05, torchrun_args: Sequence[str] = (),
                        timeout: float | None = None) -> dict:
    """Launch the sweep under torchrun with nproc processes per node and return rank 0's JSON."""
    if nproc >= 1:
        sizes(min_bytes, max_bytes, factor)
    return launch("perflab.toolkit.bench.allreduce", "the all-reduce sweep", nproc, out,
                  size_args(min_bytes, max_bytes, factor, target_s), torchrun_args=torchrun_args, timeout=timeout)


def table_rows(doc: dict) -> list[tuple[str, ...]]:
    return [(_size(r["bytes"]), f"{r['time_us']:.1f}", f"{r['algbw_gbps']:.2f}", f"{r['busbw_gbps']:.2f}")
            for r in doc["rows"]]


def _size(b: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= scale:
            return f"{b / scale:g} {unit}"
    return f"{b} B"


if __name__ == "__main__":
    raise SystemExit(worker_main())
