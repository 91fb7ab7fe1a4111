"""Synthetic CUDA-graph captures and replays with the event shapes torch.profiler writes (for tests).

While `torch.cuda.graph` captures, each op runs on the host with its shapes and its launch calls are recorded
with a correlation id but run nothing (no GPU event); the capture sits between `cudaStreamBeginCapture` and
`cudaStreamEndCapture` (then `cudaGraphInstantiate`). A replay is one `cudaGraphLaunch` (no op around it in a
serving loop) whose GPU ops carry its correlation id and no External id, as in the recorded graphed decode of
tests/data/stacks. Eager runs of the same ops go through TraceBuilder.gpu_op, so both can be compared.

An op is (name, Input Dims, Input type, [node, ...]); a node is (kind, GPU name, µs[, bytes]) with kind one of
"kernel", "triton" (launched through cuLaunchKernelEx), "memset", "memcpy".
"""
from __future__ import annotations

from perflab.trace.builders.synthetic import LAUNCH_US, TraceBuilder

_CALLS = {"kernel": ("cudaLaunchKernel", 211), "triton": ("cuLaunchKernelEx", 652),
          "memset": ("cudaMemsetAsync", 51), "memcpy": ("cudaMemcpyAsync", 41)}
_CATS = {"kernel": "kernel", "triton": "kernel", "memset": "gpu_memset", "memcpy": "gpu_memcpy"}


def capture(b: TraceBuilder, ops: list[tuple], *, cpu_us: float = 6.0) -> list[tuple]:
    """Record a capture of `ops`; returns the graph's nodes (what each replay runs), in capture order."""
    b._corr += 1
    b._x("cuda_runtime", "cudaStreamBeginCapture", b.now, 4.0, cbid=321, correlation=b._corr)
    b.now += 4.0
    nodes = []
    for name, dims, dtypes, launches in ops:
        with b.span(name, **{"Input Dims": dims, "Input type": dtypes}) as ev:
            b.now += cpu_us * 0.5
            for node in launches:
                call, cbid = _CALLS[node[0]]
                b._corr += 1
                b._x("cuda_driver" if call.startswith("cu") and not call.startswith("cuda") else "cuda_runtime",
                     call, b.now, LAUNCH_US, **{"External id": ev["args"]["External id"], "cbid": cbid,
                                                "correlation": b._corr})
                b.now += LAUNCH_US
                nodes.append(node)
            b.now += cpu_us * 0.5
    for call, cbid in (("cudaStreamEndCapture", 322), ("cudaGraphInstantiateWithFlags", 337)):
        b._corr += 1
        b._x("cuda_runtime", call, b.now, 10.0, cbid=cbid, correlation=b._corr)
        b.now += 10.0
    return nodes


def replay(b: TraceBuilder, nodes: list[tuple], *, stream: int = 7, launch_us: float = 12.0,
           streams: list[int] | None = None) -> None:
    """One cudaGraphLaunch running `nodes` back to back (on `streams[i]` where given, else `stream`)."""
    b._corr += 1
    corr = b._corr
    b._x("cuda_runtime", "cudaGraphLaunch", b.now, launch_us, cbid=311, correlation=corr)
    t = max(b.now + 12.0, max(b.free_at.values(), default=0.0))
    for i, node in enumerate(nodes):
        kind, name, us = node[0], node[1], node[2]
        on = streams[i] if streams else stream
        extra = {"bytes": node[3]} if len(node) > 3 else {"grid": [528, 1, 1], "block": [128, 1, 1]}
        b._x(_CATS[kind], name, t, us, pid=b.device, tid=on,
             **{"device": b.device, "context": 1, "stream": on, "correlation": corr, **extra})
        t += us + 0.4
    b.free_at[stream] = t
    b.now += launch_us


def eager(b: TraceBuilder, ops: list[tuple], *, stream: int = 7, cpu_us: float = 6.0) -> None:
    """The same ops run eagerly: each launch runs its node at once (for comparison with the replays)."""
    for name, dims, dtypes, launches in ops:
        with b.span(name, **{"Input Dims": dims, "Input type": dtypes}) as ev:
            b.now += cpu_us * 0.5
            for node in launches:
                kind, gname, us = node[0], node[1], node[2]
                extra = {"bytes": node[3]} if len(node) > 3 else {"grid": [528, 1, 1], "block": [128, 1, 1]}
                b.gpu_op(_CATS[kind], gname, us, stream, _CALLS[kind][0], LAUNCH_US, ev["args"]["External id"],
                         **extra)
            b.now += cpu_us * 0.5
