"""launch-overhead: the reference solution.

Same model, same weights, same input as workload.py. The forward pass is captured once into a
CUDA graph in setup(); step() copies the input into the graph's static input buffer and replays
the graph: one launch (cudaGraphLaunch) instead of ~1,000 cudaLaunchKernel calls, so the GPU runs
the kernels back to back instead of waiting for Python between them.

On a device without CUDA (CI's "cpu") it falls back to running the model eagerly.
"""
from __future__ import annotations

from perflab.workloads import siblings

_w = siblings.load(__file__, "01-launch-overhead")   # this puzzle's workload.py: what the fix keeps
SIZE, SMOKE_SIZE, _build = _w.SIZE, _w.SMOKE_SIZE, _w._build


def setup(device: str, seed: int) -> dict:
    import torch

    model, x, size = _build(device, seed)
    state = {"device": str(device), "model": model, "x": x, "size": size}
    if not str(device).startswith("cuda"):
        return state                                   # CPU: no graphs, run eagerly

    static_x = x.clone()                               # the graph always reads this buffer
    with torch.no_grad():
        # Warm up on a side stream (lets lazy init, cuBLAS handles and the allocator settle
        # outside the capture), then capture one forward pass.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                model(static_x)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = model(static_x)
    torch.cuda.synchronize()
    state.update(graph=graph, static_x=static_x, out=static_out)
    return state


def step(state: dict):
    import torch

    if "graph" not in state:                           # CPU fallback
        with torch.no_grad():
            return state["model"](state["x"])
    state["static_x"].copy_(state["x"])                # new input -> static buffer
    state["graph"].replay()                            # ~1,000 kernels, one launch
    return state["out"].clone()                        # the next replay overwrites state["out"]
