"""pageable-copies: the reference solution.

Same weights, same host data, same outputs as workload.py. Three changes, all in setup() + step():

1. The host batches live in pinned (page-locked) memory, made once in setup(): the GPU's copy
   engine can DMA straight from them, at several times the pageable rate.
2. The copies are asynchronous (``non_blocking=True``) into two preallocated device slots
   (double buffering), issued on a separate copy stream.
3. While the compute stream works on micro-batch i, the copy stream already brings in i+1;
   CUDA events order the two (copy of i done -> compute of i; compute of i-2 done -> slot reuse).

The outputs are written into a preallocated ``state["out"]`` [K, rows, dim] and returned.
On the CPU (no pinned memory, no streams) it runs the plain loop.
"""
from __future__ import annotations

from perflab.workloads import siblings

_w = siblings.load(__file__, "03-pageable-copies")   # this puzzle's workload.py: what the fix keeps
SIZE, SMOKE_SIZE, _build, compute = _w.SIZE, _w.SMOKE_SIZE, _w._build, _w.compute


def setup(device: str, seed: int) -> dict:
    import torch

    state = _build(device, seed)
    state["device"] = str(device)
    if not str(device).startswith("cuda"):
        return state
    size = state["size"]
    n, d, k = size["rows"], size["dim"], size["batches"]
    # 1. pinned host copies of the same data (once; the pageable originals are dropped)
    state["host_batches"] = [tuple(t.pin_memory() for t in batch) for batch in state["host_batches"]]
    # 2. two device slots for (x, r, s), an output buffer, a copy stream
    state["slots"] = [
        tuple(torch.empty_like(t, device=device) for t in state["host_batches"][0]) for _ in range(2)
    ]
    state["out"] = torch.empty(k, n, d, dtype=torch.bfloat16, device=device)
    state["copy_stream"] = torch.cuda.Stream()
    torch.cuda.synchronize()
    return state


def step(state: dict):
    import torch

    w1, w2 = state["w1"], state["w2"]
    if "copy_stream" not in state:                      # CPU: the plain loop
        with torch.no_grad():
            return torch.stack([compute(x, r, s, w1, w2) for x, r, s in state["host_batches"]])

    batches, slots, out = state["host_batches"], state["slots"], state["out"]
    compute_stream, copy_stream = torch.cuda.current_stream(), state["copy_stream"]
    k = len(batches)
    copied = [torch.cuda.Event() for _ in range(k)]     # batch i is in its slot
    consumed = [torch.cuda.Event() for _ in range(k)]   # compute i no longer needs its slot

    # the slots may still be read by the previous step's compute: copies start after it
    copy_stream.wait_stream(compute_stream)

    def prefetch(i):
        with torch.cuda.stream(copy_stream):
            if i >= 2:
                copy_stream.wait_event(consumed[i - 2])  # slot i % 2 is free again
            for dst, src in zip(slots[i % 2], batches[i]):
                dst.copy_(src, non_blocking=True)        # pinned -> device, asynchronous
            copied[i].record(copy_stream)

    with torch.no_grad():
        prefetch(0)
        for i in range(k):
            if i + 1 < k:
                prefetch(i + 1)                          # overlaps with compute(i) below
            compute_stream.wait_event(copied[i])
            x, r, s = slots[i % 2]
            compute(x, r, s, w1, w2, out=out[i])
            consumed[i].record(compute_stream)
    return out
