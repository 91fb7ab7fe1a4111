"""exposed-allreduce: the reference solution.

Same model, micro-batches, gradient bucket and result as workload.py. Each weight's gradient is
all-reduced as soon as backward has produced it (a post-accumulate-grad hook issues an asynchronous
all-reduce of that weight's slice of the bucket), so the all-reduce of layer k runs on NCCL's
stream while backward computes layer k-1. After backward the step waits for the outstanding
all-reduces (on the GPU: the compute stream waits for NCCL's, the host does not block) and divides.
DistributedDataParallel does the same with its buckets (bucket_cap_mb) and its autograd hooks.
"""
from __future__ import annotations

from perflab.workloads import siblings

_w = siblings.load(__file__, "70-exposed-allreduce")   # this puzzle's workload.py: what the fix keeps
SIZE, SMOKE_SIZE, loss_of = _w.SIZE, _w.SMOKE_SIZE, _w.loss_of


def setup(device: str, seed: int) -> dict:
    import torch.distributed as dist

    state = _w.setup(device, seed)           # the same model, micro-batch and gradient bucket
    state["pending"] = []
    if state["world"] > 1:
        def reduce_now(w):                   # this gradient is complete: send it now
            state["pending"].append(dist.all_reduce(w.grad, async_op=True))

        for w in state["weights"]:
            w.register_post_accumulate_grad_hook(reduce_now)
    return state


def step(state: dict):
    bucket = state["out"]
    bucket.zero_()
    loss_of(state).backward()                    # all-reduces start inside backward, layer by layer
    for work in state["pending"]:
        work.wait()                              # the GPU waits for NCCL; the host does not block
    state["pending"].clear()
    bucket.div_(state["world"])
    return bucket
