"""Synthetic per-rank traces of a pipeline-parallel job (GPipe schedule), for tests of the pipeline analyses.

Each rank is one stage. Forward: a stage receives micro-batch i from the previous stage (an NCCL
SendRecv kernel that spins until the data arrives), computes it, sends it on; with training, after all
forwards the backward passes run the other way. The stages' clocks are one clock (one host), and every
step starts and ends on all ranks together (as ProfilerStep ranges do when the stages wait on each other).
"""
from __future__ import annotations

from perflab.trace.builders.synthetic import GEMM, TraceBuilder

P2P = "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"


def _schedule(stages: int, micro: int, fwd_us: float, bwd_us: float, xfer_us: float, training: bool):
    """Finish times of each stage's forward and backward passes, relative to the step start."""
    fin_f = [[0.0] * micro for _ in range(stages)]
    for s in range(stages):
        for i in range(micro):
            ready = max(fin_f[s][i - 1] + (xfer_us if s < stages - 1 else 0.0) if i else 0.0,
                        fin_f[s - 1][i] + xfer_us if s else 0.0)
            fin_f[s][i] = ready + fwd_us
    fin_b = [[0.0] * micro for _ in range(stages)]
    if training:
        for s in reversed(range(stages)):
            for i in range(micro):
                ready = max(fin_b[s][i - 1] + (xfer_us if s else 0.0) if i else fin_f[s][micro - 1],
                            fin_b[s + 1][i] + xfer_us if s < stages - 1 else 0.0)
                fin_b[s][i] = ready + bwd_us
    return fin_f, fin_b


def gpipe(stages: int = 4, micro_batches: int = 2, steps: int = 3, fwd_us: float = 400.0, bwd_us: float = 800.0,
          xfer_us: float = 20.0, training: bool = True) -> list[TraceBuilder]:
    fin_f, fin_b = _schedule(stages, micro_batches, fwd_us, bwd_us, xfer_us, training)
    builders = [TraceBuilder(rank=s, world_size=stages) for s in range(stages)]
    span = max(max(r) for r in (fin_b if training else fin_f)) + 100.0
    for n in range(steps):
        t0 = max(b.now for b in builders) + 50.0
        for s, b in enumerate(builders):
            b.python(t0 - b.now)
            b.free_at[7] = t0
            with b.step(n):
                phases = [("aten::mm", fwd_us, fin_f[s], s > 0, s < stages - 1,
                           [fin_f[s - 1][i] + xfer_us for i in range(micro_batches)] if s else None)]
                if training:
                    phases.append(("autograd::engine::evaluate_function: MmBackward0", bwd_us, fin_b[s],
                                   s < stages - 1, s > 0,
                                   [fin_b[s + 1][i] + xfer_us for i in range(micro_batches)] if s < stages - 1 else None))
                for op, us, _fin, receives, sends, arrive in phases:
                    for i in range(micro_batches):
                        if receives:
                            start = max(b.now + 3.0, b.free_at[7])
                            b.op("nccl:recv", [(P2P, max(t0 + arrive[i] - start, 2.0))], cpu_us=6.0)
                        b.op(op, [(GEMM, us, (132, 1, 1), (384, 1, 1))], cpu_us=10.0)
                        if sends:
                            b.op("nccl:send", [(P2P, xfer_us)], cpu_us=6.0)
                b.synchronize()
                b.python(max(t0 + span - b.now, 0.0))  # blocked until the last stage is done (the next step's p2p)
    return builders
