"""Was the GPU recorded? A trace whose host launched GPU work but that holds no GPU activity.

torch.profiler with `activities=[ProfilerActivity.CPU]` keeps the host side of every launch
(`cudaLaunchKernel`, `cuLaunchKernel`, `cudaMemcpyAsync`, `cudaGraphLaunch`, ROCm's `hip*` ones) but no
kernel, copy or memset: the GPU did work that the trace cannot show, and reading it as a CPU workload
would blame the host for time the GPU spent. A trace recorded under the CUPTI range profiler
(`experimental_config` with profiler metrics) holds `cuda_profiler_range` rows instead of kernels:
counters per kernel, replayed one at a time, with no timeline. Pure: no torch.
"""
from __future__ import annotations

import re
from collections import Counter

import numpy as np

from perflab.trace.model import KERNEL, MEMCPY, MEMSET, RUNTIME, Trace

_LAUNCH = re.compile(r"^(cuda|cu|hip)\w*(Launch\w*|Memcpy\w*|Memset\w*)$")
# the calls that launch kernels (a graph launch runs the kernels of a graph); host functions run no kernel
_KERNEL_LAUNCH = re.compile(r"^(cuda|cu|hip)(Ext)?(Module)?(LaunchKernel\w*|LaunchCooperativeKernel\w*|GraphLaunch\w*)$")
PROFILER_RANGE = "cuda_profiler_range"


def is_launch_call(name: str) -> bool:
    return _LAUNCH.match(name.strip()) is not None and "Occupancy" not in name


def is_kernel_launch(name: str) -> bool:
    return _KERNEL_LAUNCH.match(name.strip()) is not None


def unrecorded_kernels(trace: Trace) -> dict | None:
    """For a trace with GPU activity but no kernel record while its host launched kernels (copies and memsets
    recorded, kernels lost: CUPTI's kernel activity off or dropped): the launches and what to do; None otherwise.
    Read as it is, such a trace would blame the host for the time the GPU spent in kernels it cannot show."""
    if np.any(trace.kind == KERNEL) or not np.any(np.isin(trace.kind, (MEMCPY, MEMSET))):
        return None  # kernels recorded, or no GPU activity at all (unrecorded_gpu_work says why)
    launches = np.flatnonzero((trace.kind == RUNTIME) & trace.name_table_mask(is_kernel_launch))
    if launches.size == 0:
        return None
    names = Counter(trace.name_of(r) for r in launches.tolist())
    what = ", ".join(f"{n} x{c}" for n, c in names.most_common(3))
    summary = (f"The GPU's kernels were not recorded: the host launched kernels {launches.size} times ({what}) but "
               "the trace holds no kernel record (only copies or memsets): no GPU busy time, idle time or kernel can be "
               "read from it, and its CPU time is not what kept the GPU waiting.")
    fix = ("Profile again with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] and let the steps run after "
           "warm-up (`perflab profile -- CMD` does both); if kernels are still missing, CUPTI dropped them: record "
           "fewer steps (--steps) or raise its buffer (KINETO_CONFIG / CUPTI_ACTIVITY buffer size).")
    return {"launches": int(launches.size), "launch_names": dict(names.most_common()), "kernel_records": 0,
            "summary": summary, "fix": fix}


def unrecorded_gpu_work(trace: Trace) -> dict | None:
    """For a trace without GPU activity: the launches its host made (name -> count) and the CUPTI profiler
    ranges it holds instead, with what to do; None when the host launched nothing either."""
    launches = np.flatnonzero((trace.kind == RUNTIME) & trace.name_table_mask(is_launch_call))
    ranges = np.flatnonzero(np.isin(trace.cat, [i for i, c in enumerate(trace.cats) if c.lower() == PROFILER_RANGE]))
    if launches.size == 0 and ranges.size == 0:
        return None
    names = Counter(trace.name_of(r) for r in launches.tolist())
    what = ", ".join(f"{n} x{c}" for n, c in names.most_common(3))
    if ranges.size:
        summary = (f"GPU activity was not recorded as a timeline: the trace holds {ranges.size} CUPTI profiler "
                   f"ranges (hardware counters per kernel, each kernel replayed alone) instead of kernel records"
                   + (f", for {launches.size} launches ({what})" if launches.size else "")
                   + ": no GPU time, idle time or overlap can be read from it.")
        fix = ("Profile again without the CUPTI range profiler (no profiler_metrics in torch.profiler's "
               "experimental_config), with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]; read "
               "per-kernel counters with Nsight Compute instead.")
    else:
        summary = (f"GPU activity was not recorded: the host launched GPU work {launches.size} times ({what}) but "
                   "the trace holds no kernel, copy or memset: it was profiled without ProfilerActivity.CUDA.")
        fix = ("Profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] (torch.profiler.profile), "
               "then run perflab doctor on the new trace.")
    return {"launches": int(launches.size), "launch_names": dict(names.most_common()),
            "profiler_ranges": int(ranges.size), "summary": summary, "fix": fix}
