"""Bus bandwidth of several collectives over a size sweep, like nccl-tests' *_perf programs.

Launched under torchrun (one process per GPU):

    python -m torch.distributed.run --nproc-per-node 2 -m perflab.toolkit.bench.collectives \
        --kinds all_reduce,all_gather,reduce_scatter,all_to_all --out collectives.json
    perflab bench --collectives all_reduce,all_gather,reduce_scatter,all_to_all [--gpus N]   # the same

Sizes are nccl-tests' (doc/PERFORMANCE.md): the full buffer, i.e. all_reduce's and all_to_all's
buffer, all_gather's gathered output, reduce_scatter's input; busbw = algbw x the kind's factor
(analysis/multigpu/collectives.py BUS_FACTOR). The time of one call is the slowest rank's mean. Rank 0 writes the
JSON (schema perflab.collectives/1) with the machine's manifest and topology (`nvidia-smi topo -m`), which
the doctor's comm-below-roof reads as the interconnect's ceiling for each kind and size.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable

from perflab.analysis.multigpu.collective_sizes import BUS_FACTOR
from perflab.analysis.work.saved_ceilings import COLLECTIVES_SCHEMA as SCHEMA
from perflab.errors import PerflabError
from perflab.toolkit.bench.allreduce import DEFAULT_MAX, DEFAULT_MIN, _manifest, _size, sizes, time_calls
from perflab.toolkit.bench.torchrun_sweep import launch, run_worker, size_args, worker_args

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


def parse_kinds(text: str) -> list[str]:
    kinds = [k.strip().replace("-", "_") for k in text.split(",") if k.strip()]
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        raise PerflabError(f"unknown collective {', '.join(bad) or '(none)'}: choose from {', '.join(KINDS)}")
    return kinds


def _op(kind: str, nbytes: int, n: int, device: Any) -> tuple[Callable[[], Any], int]:
    """(one call of the collective on a buffer of nccl-tests size `nbytes`, the size actually used)."""
    import torch
    import torch.distributed as dist

    elems = max(nbytes // 4 // n * n, n)  # float32, divisible by the rank count
    full = torch.ones(elems, dtype=torch.float32, device=device)
    part = torch.ones(elems // n, dtype=torch.float32, device=device)
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    out = torch.empty_like(full)
    calls = {"all_reduce": lambda: dist.all_reduce(full), "all_gather": lambda: gather(full, part),
             "reduce_scatter": lambda: scatter(part, full), "all_to_all": lambda: dist.all_to_all_single(out, full)}
    return calls[kind], elems * 4


def measure(kinds: Sequence[str], size_list: Sequence[int], *, warmup: int = 5, target_s: float = 0.05) -> dict:
    """Run inside an initialized process group; every rank returns the same sweeps."""
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available() and dist.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    n = dist.get_world_size()
    sweeps = {}
    for kind in kinds:
        rows = []
        for size in size_list:
            call, used = _op(kind, size, n, device)
            seconds, iters = time_calls(call, warmup=warmup, target_s=target_s, cuda=cuda, device=device)
            alg = used / seconds / 1e9 if seconds > 0 else 0.0
            rows.append({"bytes": used, "iters": iters, "time_us": seconds * 1e6, "algbw_gbps": alg,
                         "busbw_gbps": alg * BUS_FACTOR[kind](n)})
        sweeps[kind] = {"world_size": n, "rows": rows, "peak_busbw_gbps": max(r["busbw_gbps"] for r in rows)}
    return {"world_size": n, "backend": dist.get_backend(), "dtype": "float32", "sweeps": sweeps}


def topology() -> str | None:
    """`nvidia-smi topo -m` (how the GPUs are linked: NV#, PIX, PHB, SYS), or None where there is none."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        done = subprocess.run([exe, "topo", "-m"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def worker_main(argv: Sequence[str] | None = None) -> int:
    args = worker_args("collective bus bandwidth sweeps (run under torchrun)", argv,
                       lambda ap: ap.add_argument("--kinds", default=",".join(KINDS)),
                       min_bytes=DEFAULT_MIN, max_bytes=DEFAULT_MAX)

    def document(cuda: bool):
        result = measure(parse_kinds(args.kinds), sizes(args.min_bytes, args.max_bytes, args.factor),
                         target_s=args.target_s)
        env = {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}
        return lambda: {"schema": SCHEMA, "manifest": {**_manifest(cuda), "nccl_env": env}, "topology": topology(),
                        **result}

    return run_worker(args.out, document)


def run_collectives_bench(nproc: int, out: Path, kinds: Sequence[str] = KINDS, *, min_bytes: int = DEFAULT_MIN,
                          max_bytes: int = DEFAULT_MAX, factor: int = 4, target_s: float = 0.05,
                          timeout: float | None = None) -> dict:
    """Launch the sweeps under torchrun with nproc processes and return rank 0's JSON (also left at `out`)."""
    if nproc >= 1:
        sizes(min_bytes, max_bytes, factor)
    return launch("perflab.toolkit.bench.collectives", "the collective sweeps", nproc, out,
                  ["--kinds", ",".join(kinds), *size_args(min_bytes, max_bytes, factor, target_s)], timeout=timeout)


def table_rows(doc: dict) -> list[tuple[str, ...]]:
    return [(kind, _size(r["bytes"]), f"{r['time_us']:.1f}", f"{r['algbw_gbps']:.2f}", f"{r['busbw_gbps']:.2f}")
            for kind, sweep in doc["sweeps"].items() for r in sweep["rows"]]


def plot(doc: dict, out: Path, *, force: bool = False) -> Path:
    """busbw against message size, one line per kind (log-scale size)."""
    from perflab.report.plotting import pyplot, save_figure

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for kind, sweep in doc["sweeps"].items():
        rows = sweep["rows"]
        ax.plot([r["bytes"] for r in rows], [r["busbw_gbps"] for r in rows], marker="o", ms=3, label=kind)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes, nccl-tests convention)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    m = doc.get("manifest") or {}
    ax.set_title(f"{doc['world_size']} x {m.get('gpu') or 'CPU'} ({doc['backend']}, NCCL {m.get('nccl') or '-'}, "
                 f"{str(m.get('date', ''))[:10]})", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, out, force=force, dpi=120)


if __name__ == "__main__":
    raise SystemExit(worker_main())
