"""Fixes in CUDA terms for programs that are not PyTorch (an Nsight Systems capture of a CUDA C++, Julia or
Fortran program): the same finding, the API that program calls."""
from __future__ import annotations

from perflab.doctor.context import Context

CUDA_FIXES = {
    "host-sync": "Synchronize only where the host needs a result: work on one stream already runs in order, so "
                 "each cudaDeviceSynchronize/cudaStreamSynchronize the host does not need drains the queue for "
                 "nothing. Keep the loop's decisions on the device (read a convergence flag every N iterations with cudaMemcpyAsync "
                 "into pinned memory and an event), order streams with cudaEventRecord/cudaStreamWaitEvent, or "
                 "capture the loop in a CUDA graph.",
    "launch-overhead": "Launch fewer, larger kernels: fuse short kernels, give each launch more work (one persistent "
                       "kernel, a grid of a few blocks per SM looping over the work items, instead of a launch per "
                       "item), or capture the sequence once in a CUDA graph (cudaStreamBeginCapture ... "
                       "cudaGraphLaunch) and replay it.",
    "pageable-memcpy": "Allocate the host buffers pinned (cudaMallocHost/cudaHostAlloc, or cudaHostRegister on "
                       "existing memory) once and reuse them; copy with cudaMemcpyAsync on a stream so the copies "
                       "run asynchronously and overlap with compute.",
    "allocator-churn": "Allocate device and pinned host buffers once, outside the loop, and reuse them: cudaMalloc, "
                       "cudaFree, cudaHostAlloc and cudaFreeHost synchronize and are slow (pinning host pages most of "
                       "all); for temporaries whose size changes, use stream-ordered allocation (cudaMallocAsync / "
                       "cudaFreeAsync with a memory pool that keeps its memory: cudaMemPoolAttrReleaseThreshold).",
    "no-overlap": "Issue the copies for iteration N+1 with cudaMemcpyAsync from pinned memory on a second stream "
                  "while iteration N computes (cudaEventRecord/cudaStreamWaitEvent to order them): the copy "
                  "engines run beside the SMs.",
}


def fix(ctx: Context, finding_id: str, torch_fix: str) -> str:
    """The PyTorch fix, or its CUDA form when the trace is of a program that does not run PyTorch."""
    if ctx.trace.meta.get("framework", "pytorch") == "pytorch":
        return torch_fix
    return CUDA_FIXES.get(finding_id, torch_fix)
