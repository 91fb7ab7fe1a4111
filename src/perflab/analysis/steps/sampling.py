"""Hot functions of a sampled CPU profile (trace.speedscope): where the samples land.

A sample is one stack, outermost frame first. A function's own (self) share is the weight of the
samples whose innermost frame is in it; its total share, the weight of the samples with it anywhere
on the stack (counted once per sample, recursion included). Functions are named file.py:function
(lines merged). py-spy records Python frames only: time in a C call (a torch op, torch.tensor of a
list) is the own time of the Python function that made the call.

`within` keeps only the samples under a frame of that name, e.g. the measured loop of
puzzles.loop_target ("sampled_steps"): imports, setup and warm-up drop out. Shares are of the kept
samples. Pure: no torch.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any

from perflab.trace.speedscope import SampledProfile

TOP = 10


def hot_functions(prof: SampledProfile, within: str = "", top: int = TOP) -> dict[str, Any]:
    labels = [f.label() for f in prof.frames]
    inside = {i for i, f in enumerate(prof.frames) if f.name == within} if within else set()
    own: dict[str, float] = defaultdict(float)
    total: dict[str, float] = defaultdict(float)
    kept = weight_all = 0.0
    samples = 0
    threads = set()
    for t in prof.threads:
        for stack, w in zip(t.stacks, t.weights):
            samples += 1
            weight_all += w
            if within:
                cut = next((k for k, i in enumerate(stack) if i in inside), None)
                if cut is None:
                    continue
                stack = stack[cut:]
            if not stack:
                continue
            kept += w
            threads.add(t.name)
            own[labels[stack[-1]]] += w
            for name in {labels[i] for i in stack}:
                total[name] += w
    rows = [{"function": k, "self_pct": round(100.0 * v / kept, 2) if kept else 0.0,
             "total_pct": round(100.0 * total[k] / kept, 2) if kept else 0.0, "self_weight": v}
            for k, v in sorted(own.items(), key=lambda kv: (-kv[1], kv[0]))]
    return {"samples": samples, "kept_pct": round(100.0 * kept / weight_all, 2) if weight_all else 0.0,
            "within": within, "threads": sorted(threads), "functions": rows[:top],
            "by_total": sorted(({"function": k, "total_pct": round(100.0 * v / kept, 2)} for k, v in total.items()),
                               key=lambda r: -r["total_pct"])[:top] if kept else []}
