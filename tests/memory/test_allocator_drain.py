"""A free that drains the GPU: torch.cuda.empty_cache() between layers (the allocator-churn puzzle's pattern).

cudaFree waits for the device to finish before it frees; when it returns the host has no lead, and the GPU
idles while the host dispatches the next op, asks cudaMalloc for its output and launches it. That restart is the
price of the free (analysis.gpu_memory.allocator.drained_by_free), even when the allocator calls themselves are short.
"""
from __future__ import annotations

import pytest

from perflab.analysis.idle.gaps import analyze_gaps
from perflab.analysis.steps.windows import analysis_windows
from perflab.doctor import diagnose
from perflab.trace import kineto
from perflab.trace.builders import synthetic


def layer(build: synthetic.TraceBuilder, kernel_us: float, malloc_us: float, before_us: float = 6.0,
          after_us: float = 0.0, name: str = "aten::linear") -> None:
    """One eager op: dispatch (before_us), cudaMalloc for its output (the cache is empty), more dispatch
    (after_us), the launch, 4 µs to return."""
    with build.span(name) as ev:
        build.now += before_us
        if malloc_us:
            build._x("cuda_runtime", "cudaMalloc", build.now, malloc_us, cbid=20, correlation=0)
            build.now += malloc_us
        build.now += after_us
        build.gpu_op("kernel", synthetic.GEMM, kernel_us, 7, "cudaLaunchKernel", synthetic.LAUNCH_US,
                     ev["args"]["External id"], grid=[132, 1, 1], block=[384, 1, 1])
        build.now += 4.0


def empty_cache(build: synthetic.TraceBuilder, free_us: float, *, drain: bool = True, name: str = "cudaFree") -> None:
    """torch.cuda.empty_cache(): the free first waits for the queued work (drain), then releases the block."""
    build.python(3.0)
    done = max(build.now, max(build.free_at.values())) if drain else build.now
    build._x("cuda_runtime", name, build.now, done - build.now + free_us, cbid=22, correlation=0)
    build.now = done + free_us
    build.python(3.0)


def layers_with_empty_cache(malloc_us: float = 4.0, free_us: float = 2.0, steps: int = 4, blocks: int = 12,
                            kernels: int = 3, kernel_us: float = 15.0, free: str = "cudaFree") -> synthetic.TraceBuilder:
    """Blocks of `kernels` ops the host queues ahead of the GPU, then empty_cache(); the first op of the next
    block waits for cudaMalloc (the cache is empty). `free=""`, `malloc_us=0`: the same loop with the cache kept."""
    build = synthetic.TraceBuilder()
    for n in range(steps):
        with build.step(n):
            for _ in range(blocks):
                layer(build, kernel_us, malloc_us)
                for _ in range(kernels - 1):
                    layer(build, kernel_us, 0.0)
                if free:
                    empty_cache(build, free_us, name=free)
    return build


def gaps(tmp_path, build):
    trace = kineto.load(build.write(tmp_path / "t.json"))
    return analyze_gaps(trace, analysis_windows(trace))


def test_the_restart_after_a_draining_free_is_the_allocators(tmp_path):
    """Was 'launch': the calls are short (4 µs cudaMalloc, 2 µs after the drain), most of each gap is dispatch."""
    g = gaps(tmp_path, layers_with_empty_cache())
    idle = g.idle_us
    assert idle > 0.25 * g.window_us
    assert g.by_cause["alloc"] > 0.9 * idle and g.by_cause["launch"] < 0.05 * idle, g.to_dict()


@pytest.mark.parametrize("free", ["cudaFree", "cuMemFree_v2", "hipFree"])
def test_the_doctor_names_the_free_not_launch_overhead(tmp_path, free):
    report = diagnose(layers_with_empty_cache(free=free).write(tmp_path / "t.json"))
    top = report.findings[0]
    assert top.id == "allocator-churn" and top.severity == "high", [(f.id, f.gain_pct) for f in report.findings]
    # the GPU's idle time is the allocator's: its gain is about all of it
    assert top.gain_pct > 0.9 * top.evidence["gpu_idle_pct"]
    assert top.evidence["frees_per_step"] == 12 and top.evidence["allocs_per_step"] == 12
    assert not any(f.id == "launch-overhead" and f.severity in ("high", "medium") for f in report.findings)


def test_a_wait_that_is_no_free_stays_where_it_was(tmp_path):
    """The same timeline with the drain in a plain synchronize: the allocator is not blamed for it."""
    build = synthetic.TraceBuilder()
    for n in range(4):
        with build.step(n):
            for _ in range(12):
                layer(build, 15.0, 0.0)
                layer(build, 15.0, 0.0)
                layer(build, 15.0, 0.0)
                build.synchronize()
    g = gaps(tmp_path, build)
    assert g.by_cause["alloc"] == 0 and g.by_cause["sync"] > 0.5 * g.idle_us, g.to_dict()


def test_a_malloc_the_gpu_ran_dry_in_is_not_a_drain(tmp_path):
    """A cudaMalloc does not wait for the device: a gap that starts inside one and is mostly dispatch stays launch."""
    build = synthetic.TraceBuilder()
    for n in range(4):
        with build.step(n):
            for _ in range(40):  # each kernel ends inside the next op's cudaMalloc, 15 µs of dispatch follow
                layer(build, 10.0, 6.0, before_us=2.0, after_us=15.0)
    g = gaps(tmp_path, build)
    assert g.by_cause["alloc"] == 0 and g.by_cause["launch"] > 0.9 * g.idle_us, g.to_dict()
