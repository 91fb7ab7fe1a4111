#!/usr/bin/env python3
"""Synthetic multi-rank jobs: N ranks of about M MB of Kineto JSON, one straggler rank and one slow link.

    python benchmarks/multirank_jobs.py OUT_DIR --ranks 64 --mb 40 [--straggler R] [--slow-pair R]

Each step of every rank: LAYERS compute kernels, then an all-reduce inside the rank's pair (ranks 2k, 2k+1:
their own process group), then an all-reduce over the world. The straggler spends STRAGGLE_SHARE of the step's
compute on the host before the world all-reduce, so every other rank's world all-reduce kernel waits that long.
Collectives and straggle scale with the GEMMs per step: a job of any size is the same workload, larger. The slow pair's
all-reduce moves the same bytes SLOW_LINK_FACTOR times slower (a degraded link between those two ranks).
Three documents are built (an ordinary rank, the straggler, a rank of the slow pair) and every rank is one of
them with its rank and pair written in, so 10 GB are written at disk speed.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from perflab.trace.builders import synthetic  # noqa: E402

GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
AR = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
STEPS = 4
GEMM_US = 40.0
# a job of any size is the same workload, larger: per GEMM of the step, the pair and world all-reduces take these
# many µs and move these many elements, and the straggler holds the host this share of the step's compute (at 4 MB
# per rank, 1,060 GEMMs: 300 and 900 µs, 16 M elements, 4.2 ms)
PAIR_US_PER_GEMM, WORLD_US_PER_GEMM = 300.0 / 1060, 900.0 / 1060
NELEMS_PER_GEMM = (16 << 20) // 1060
STRAGGLE_SHARE = 0.1
SLOW_LINK_FACTOR = 6.0
_RANK, _PAIR = "987654321", "[123456789]"  # placeholders written into the template, replaced per rank


def _collective(b: synthetic.TraceBuilder, group: str, size: int, us: float, nelems: int) -> None:
    args = {"Collective name": "allreduce", "In msg nelems": nelems, "Out msg nelems": nelems, "Group size": size,
            "dtype": "BFloat16", "Process Group Ranks": group}
    b.wait_stream(20, 7)
    with b.span("record_param_comms", **args) as ev:
        b.gpu_op("kernel", AR, us, 20, "cudaLaunchKernel", 5.0, ev["args"]["External id"], **args)
    b.wait_stream(7, 20)


def template(world: int, layers: int, role: str) -> str:
    """One rank's document as text, with _RANK and _PAIR to fill in; role: rank | straggler | slow-link."""
    b = synthetic.TraceBuilder(rank=int(_RANK), world_size=world)
    world_group = json.dumps(list(range(world)))
    straggle_us, nelems = STRAGGLE_SHARE * layers * GEMM_US, NELEMS_PER_GEMM * layers
    for n in range(STEPS):
        with b.step(n):
            for _ in range(layers):
                b.op("aten::mm", [(GEMM, GEMM_US, (132, 1, 1), (384, 1, 1))], cpu_us=4.0)
            _collective(b, _PAIR, 2, PAIR_US_PER_GEMM * layers * (SLOW_LINK_FACTOR if role == "slow-link" else 1.0),
                        nelems)
            if role == "straggler":
                b.host("aten::item", straggle_us)
            _collective(b, world_group, world, WORLD_US_PER_GEMM * layers + (0.0 if role == "straggler" else straggle_us),
                        nelems)
            b.synchronize()
    return json.dumps(synthetic.document(b.events, rank=int(_RANK), world_size=world))


def layers_for(mb: float, world: int) -> int:
    probe = 200
    size = len(template(world, probe, "rank"))
    return max(1, int(mb * 1e6 / (size / probe)))


_DOCS: dict[str, str] = {}   # the templates, shared with the writer processes (forked after they are built)


def _write_rank(out: Path, r: int, ranks: int, role: str) -> int:
    pair = json.dumps([r & ~1, r | 1]) if (r | 1) < ranks else json.dumps([r])
    text = _DOCS[role].replace(_RANK, str(r)).replace(json.dumps(_PAIR), json.dumps(pair))
    (out / f"rank{r}.trace.json").write_text(text)
    return len(text)


def write_job(out: Path, ranks: int, mb: float, straggler: int, slow_pair: int, processes: int = 1) -> dict:
    """Write the job; `processes` > 1 writes the ranks from that many forked processes (10 GB at disk speed)."""
    out.mkdir(parents=True, exist_ok=True)
    layers = layers_for(mb, ranks)
    roles = ("rank", "straggler", "slow-link")
    slow = {slow_pair, slow_pair ^ 1}
    work = [(out, r, ranks, "straggler" if r == straggler else "slow-link" if r in slow else "rank")
            for r in range(ranks)]
    _DOCS.clear()
    if processes > 1:
        import multiprocessing

        fork = multiprocessing.get_context("fork")
        with fork.Pool(len(roles)) as pool:
            _DOCS.update(zip(roles, pool.starmap(template, [(ranks, layers, role) for role in roles])))
        with fork.Pool(processes) as pool:
            total = sum(pool.starmap(_write_rank, work, chunksize=max(1, ranks // (4 * processes))))
    else:
        _DOCS.update({role: template(ranks, layers, role) for role in roles})
        total = sum(_write_rank(*w) for w in work)
    return {"ranks": ranks, "bytes": total, "layers_per_step": layers, "straggler": straggler,
            "slow_pair": sorted(slow)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--mb", type=float, default=4.0)
    ap.add_argument("--straggler", type=int, default=None, help="default: the last rank")
    ap.add_argument("--slow-pair", type=int, default=2, help="a rank of the slow pair (default 2: ranks 2 and 3)")
    ap.add_argument("--processes", type=int, default=1, help="write the ranks from this many processes")
    a = ap.parse_args()
    if a.out.exists() and any(a.out.iterdir()):
        print(f"{a.out} is not empty", file=sys.stderr)
        return 2
    print(json.dumps(write_job(a.out, a.ranks, a.mb, a.ranks - 1 if a.straggler is None else a.straggler,
                               a.slow_pair, a.processes)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
