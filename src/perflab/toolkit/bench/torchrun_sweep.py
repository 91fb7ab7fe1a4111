"""What the bus-bandwidth sweeps (allreduce.py, collectives.py) share: the worker's options and process group
(every rank measures, rank 0 writes --out) and the torchrun launch that reads rank 0's JSON back."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable

from perflab.errors import PerflabError


def worker_args(description: str, argv: Sequence[str] | None, extra: Callable[[Any], None] | None = None,
                *, min_bytes: int, max_bytes: int) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--out", type=Path, required=True)
    if extra is not None:
        extra(ap)
    ap.add_argument("--min-bytes", type=int, default=min_bytes)
    ap.add_argument("--max-bytes", type=int, default=max_bytes)
    ap.add_argument("--factor", type=int, default=4)
    ap.add_argument("--target-s", type=float, default=0.05)
    return ap.parse_args(argv)


def run_worker(out: Path, document: Callable[[bool], Callable[[], dict]]) -> int:
    """Join the process group (NCCL on a GPU, else gloo), run document(cuda) on every rank: it measures and
    returns what builds rank 0's document, which rank 0 writes to `out`."""
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if cuda else "gloo")
    try:
        build = document(cuda)
        if dist.get_rank() == 0:
            from perflab.outputs import write_output

            out.parent.mkdir(parents=True, exist_ok=True)
            write_output(out, json.dumps(build(), indent=1), force=True)
    finally:
        dist.destroy_process_group()
    return 0


def launch(module: str, what: str, nproc: int, out: Path, args: Sequence[str], *,
           torchrun_args: Sequence[str] = (), timeout: float | None = None) -> dict:
    """Run `module` under torchrun with nproc processes per node (standalone unless torchrun_args name a
    rendezvous) and return rank 0's JSON, also left at `out`."""
    from perflab.paths import child_env

    if nproc < 1:
        raise PerflabError("--gpus must be >= 1")
    out = Path(out).resolve()
    if out.exists():
        out.unlink()
    multi_node = any(a.startswith(("--nnodes", "--rdzv")) for a in torchrun_args)
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
           *([] if multi_node else ["--standalone"]), *torchrun_args, "--module", module, "--out", str(out), *args]
    try:
        code = subprocess.run(cmd, timeout=timeout, check=False, env=child_env()).returncode
    except subprocess.TimeoutExpired:
        raise PerflabError(f"{what} took longer than {timeout:.0f} s") from None
    if code != 0 or not out.is_file():
        raise PerflabError(f"{what} under torchrun failed (exit {code}); see its output above")
    return json.loads(out.read_text())


def size_args(min_bytes: int, max_bytes: int, factor: int, target_s: float) -> list[str]:
    return ["--min-bytes", str(min_bytes), "--max-bytes", str(max_bytes), "--factor", str(factor),
            "--target-s", str(target_s)]
