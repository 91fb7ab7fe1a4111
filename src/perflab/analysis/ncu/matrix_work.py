"""Matrix work in one profiled kernel: is it a matrix product, on which pipe, how many FLOPs, and what its
compulsory DRAM bytes are.

A kernel is matrix work when its name says so (gemm, matmul, mm, bmm, dot, conv, ...), when the trace ties
it to a matrix op (aten::mm, addmm, bmm, linear, conv, ...: `ops`), when it runs on the tensor pipe, or when
its instruction mix is an FMA K loop (FFMA at least a quarter of the instructions, fed by loads at no more
than 64 FFMA per load: a reduction over K of products of loaded operands).

FLOPs on the SIMT pipes come from the FLOP counters; a report without them (a basic or detailed section set)
still has the pipe's busy share, and the pipe at its peak does 2 FLOPs per lane per cycle: busy time x peak.

Compulsory bytes of a matrix product on the SIMT pipes (every input read once, every output written once:
K x (M + N) inputs and M x N outputs). The outputs are the bytes written over the element size, K = FLOPs /
(2 x outputs). A GEMV (one output column) reads K inputs per output and shares none of them: its DRAM reads are
compulsory. Otherwise M and N come from the launch: a kernel with one thread per output spans the output with
its grid x block (x: columns, y: rows); a 2-D grid of output tiles has the output's aspect (square tiles). A
1-D grid says nothing of the shape, and a skinny output (a decode step's few rows) reads far more per output
than a square one: there no compulsory bytes are claimed. Tensor-core kernels tile by construction: none either.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from perflab.analysis.ncu.ncu_sol import Units
from perflab.analysis.ncu.ncu_traffic import DramTraffic
from perflab.analysis.work.roofline import fp32_fma_peak, kernel_work
from perflab.trace.nsight_compute.ncu_model import KernelProfile

GEMM_NAME = re.compile(r"gemm|matmul|(^|[_:])mm([_<(]|$)|bmm|simt|f32f32|conv|(^|[_:])dot([_<(]|$)|dot_product", re.I)
MATRIX_OP = re.compile(r"\b(aten::)?(mm|matmul|addmm|bmm|baddbmm|linear|addmv|mv|einsum|_scaled_mm|"
                       r"conv\w*|_convolution|cudnn_convolution\w*)\b")
FFMA = "sm__sass_thread_inst_executed_op_ffma_pred_on.sum"
DFMA = "sm__sass_thread_inst_executed_op_dfma_pred_on.sum"
PIPES = {"fp32": ("FMA pipe", FFMA, 4), "fp64": ("FP64 pipe", DFMA, 8)}   # path: (pipe, FMA counter, bytes)
K_LOOP_SHARE = 0.25       # FMA at least this share of the warp instructions
K_LOOP_FMA_PER_LOAD = 64  # and fed by loads: at most this many FMA per load instruction
MIN_K = 8                 # fewer products per output is no matrix product worth tensor cores
GEMV_READS = 0.5          # DRAM reads >= this x K inputs per output: each output reads its own inputs (a GEMV)
GEMV_MAX_HIT = 25.0       # L2 read hit % above which such reads come back: an untiled product, not a GEMV


@dataclass
class MatrixWork:
    path: str                       # fp32 | fp64 (SIMT) | tensor_*
    pipe: str | None                # the SIMT pipe that does it (None on the tensor pipe)
    pipe_pct: float | None
    flops: float
    flops_basis: str
    why: list[str] = field(default_factory=list)   # name | op | tensor | fma-k-loop
    elem_bytes: int = 4
    outputs: float | None = None
    k_depth: float | None = None
    gemv_like: bool = False
    compulsory_bytes: float | None = None
    compulsory_basis: str = ""

    def evidence(self) -> dict:
        return {"matrix_work_because": self.why, "matrix_flops": self.flops, "matrix_flops_from": self.flops_basis,
                "matrix_outputs_est": self.outputs, "matrix_k_est": self.k_depth, "gemv_like": self.gemv_like}


def _fma_k_loop(k: KernelProfile, counter: str) -> bool:
    fma, inst = k.get(counter), k.get("smsp__inst_executed.sum")
    loads = sum(v or 0 for v in (k.get("smsp__sass_inst_executed_op_shared_ld.sum"),
                                  k.get("smsp__sass_inst_executed_op_global_ld.sum")))
    if not fma or not inst or not loads:
        return False
    return (fma / 32) / inst >= K_LOOP_SHARE and (fma / 32) / loads <= K_LOOP_FMA_PER_LOAD


def reasons(k: KernelProfile, ops: list[str] | None = None) -> list[str]:
    why = []
    if GEMM_NAME.search(k.name) or (k.full_name and GEMM_NAME.search(k.full_name.split("(")[0])):
        why.append("name")
    if any(MATRIX_OP.search(o) for o in (ops or [])) or any(MATRIX_OP.search(n) for n in k.nvtx or []):
        why.append("op")
    if any(p.startswith("tensor_") and v > 0 for p, v in kernel_work(k).flops.items()):
        why.append("tensor")
    if any(_fma_k_loop(k, c) for _, c, _ in PIPES.values()):
        why.append("fma-k-loop")
    return why


def simt_flops(k: KernelProfile, units: Units, path: str, roofs: dict[str, float] | None = None
               ) -> tuple[float, str]:
    """FLOPs on a SIMT path: from the counters, else the pipe's busy time at its peak (2 FLOPs per lane-cycle:
    ncu's FMA peak, else the ceilings' roof for the path)."""
    pipe, counter, _ = PIPES[path]
    counted = kernel_work(k).flops.get(path)
    if k.get(counter) is not None:
        return float(counted or 0.0), "FLOP counters"
    pct, dur = units.compute.get(pipe), k.duration_s
    peak = (fp32_fma_peak(k) if path == "fp32" else None) or (roofs or {}).get(path)
    if pct is None or not dur or not peak:
        return 0.0, ""
    return pct / 100 * dur * peak, f"{pipe} busy time x its peak (no FLOP counters)"


def matrix_work(k: KernelProfile, units: Units, traffic: DramTraffic, ops: list[str] | None = None,
                roofs: dict[str, float] | None = None) -> MatrixWork | None:
    """The kernel's matrix work on the SIMT pipe that does most of it, or on the tensor pipe; None when nothing
    says the kernel is a matrix product."""
    why = reasons(k, ops)
    if not why:
        return None
    tensor = {p: v for p, v in kernel_work(k).flops.items() if p.startswith("tensor_") and v > 0}
    if tensor:
        path = max(tensor, key=tensor.get)
        size = 1 if path in ("tensor_fp8", "tensor_int8") else 8 if path == "tensor_fp64" else 2
        mw = MatrixWork(path, None, units.compute.get("tensor pipe"), sum(tensor.values()), "tensor FLOP counters",
                        why, elem_bytes=size)
    else:
        found = [(simt_flops(k, units, p, roofs), p) for p in PIPES]
        (flops, basis), path = max(found, key=lambda x: x[0][0])
        if flops <= 0:
            return None
        pipe, _, size = PIPES[path]
        mw = MatrixWork(path, pipe, units.compute.get(pipe), flops, basis, why, elem_bytes=size)
    _shape(mw, k, traffic)
    return mw


def output_shape(k: KernelProfile, outputs: float) -> tuple[float, float, str] | None:
    """(rows M, columns N, how) of the output, from the launch (module docstring); None where it cannot say."""
    g, b = k.grid, k.block
    if not g or not b or g[2] * b[2] > 1:
        return None
    threads = g[0] * g[1] * b[0] * b[1]
    if abs(threads - outputs) <= 0.01 * outputs and g[1] * b[1] > 1:
        return g[1] * b[1], g[0] * b[0], "one thread per output: the grid x block extents"
    if g[0] > 1 and g[1] > 1:
        rows = math.sqrt(outputs * g[1] / g[0])
        return rows, outputs / rows, f"a {g[0]} x {g[1]} grid of output tiles (square tiles)"
    return None


def _shape(mw: MatrixWork, k: KernelProfile, t: DramTraffic) -> None:
    """Outputs, K and the compulsory bytes (module docstring)."""
    written, reads = t.written_bytes, t.dram_read_bytes
    if not written or reads is None or mw.flops <= 0:
        return
    outputs = written / mw.elem_bytes
    depth = mw.flops / (2 * outputs)
    mw.outputs, mw.k_depth = outputs, depth
    if depth < MIN_K:
        return
    own = mw.elem_bytes * depth * outputs          # every output reading its own K inputs
    hit = t.l2_read_hit_pct
    # a GEMV reads each output's own inputs once, first touches all (L2 hits only on the shared vector); a matrix
    # product read that way whose L2 hits show the same inputs coming back is an untiled product, re-reading
    reused = hit is not None and hit >= GEMV_MAX_HIT
    if (reads >= GEMV_READS * own and not reused) or (hit is not None and hit < 10):
        mw.gemv_like = reads >= GEMV_READS * own
        mw.compulsory_bytes = written + reads
        mw.compulsory_basis = ("bytes written + DRAM reads (each output reads its own K inputs, or L2 shows no "
                               "reuse: every read is a first touch)")
        return
    shape = output_shape(k, outputs) if mw.pipe else None
    if shape is None:
        return
    rows, cols, how = shape
    inputs = mw.elem_bytes * depth * (rows + cols)
    mw.compulsory_bytes = written + min(inputs, reads)
    mw.compulsory_basis = (f"bytes written + K x (M + N) inputs once: output {rows:,.0f} x {cols:,.0f} ({how}), "
                           f"K ~ {depth:,.0f} from the FLOPs per output")
