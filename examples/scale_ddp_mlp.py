#!/usr/bin/env python3
"""A data-parallel MLP training step for `perflab scale` (and a multi-GPU profiling example).

    perflab scale --gpus 1,2 --mode strong -- examples/scale_ddp_mlp.py --steps 20
    perflab profile --out traces -- python -m torch.distributed.run --nproc-per-node 2 examples/scale_ddp_mlp.py

NCCL on GPUs (one per local rank), gloo on the CPU. Gradients are all-reduced by
DistributedDataParallel (bucketed, overlapped with backward) or, with --sync-allreduce, by one
all-reduce of all gradients after backward (exposed: nothing left to overlap with).
--straggle-ms N adds N ms of host work per step on the last rank (a straggler).
"""
from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn

from perflab.toolkit.scaling import per_rank_batch, report_step_times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--batch", type=int, default=256, help="global batch (strong) or per-rank batch (weak)")
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--sync-allreduce", action="store_true", help="one all-reduce after backward, no overlap")
    ap.add_argument("--straggle-ms", type=float, default=0.0, help="extra host work per step on the last rank")
    args = ap.parse_args()

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", 0))
    if cuda:
        torch.cuda.set_device(local)
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    torch.manual_seed(0)
    dtype = torch.bfloat16 if cuda else torch.float32
    layers = []
    for _ in range(args.layers):
        layers += [nn.Linear(args.hidden, args.hidden), nn.GELU()]
    model = nn.Sequential(*layers).to(device=device, dtype=dtype)
    if not args.sync_allreduce and world > 1:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    batch = per_rank_batch(args.batch)
    x = torch.randn(batch, args.hidden, device=device, dtype=dtype)
    params = [p for p in model.parameters()]

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss = model(x).float().square().mean()
        loss.backward()
        if args.sync_allreduce and world > 1:
            flat = torch.cat([p.grad.reshape(-1) for p in params])
            dist.all_reduce(flat)
            flat /= world
            offset = 0
            for p in params:
                n = p.numel()
                p.grad.copy_(flat[offset:offset + n].view_as(p.grad))
                offset += n
        if args.straggle_ms and rank == world - 1:
            end = time.perf_counter() + args.straggle_ms / 1e3
            while time.perf_counter() < end:  # host work on this rank only
                pass
        opt.step()

    times = []
    for i in range(args.warmup + args.steps):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize()
        if i >= args.warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    report_step_times(times, samples_per_step=batch)
    if rank == 0:
        print(f"world {world}, batch/rank {batch}: median step {sorted(times)[len(times) // 2]:.3f} ms")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
