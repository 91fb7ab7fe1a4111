"""The measurements behind `perflab bench`: each returns {value, unit, method, ...} or raises.

Sizes come from a Plan (quick or full); every device measurement uses CUDA events, warm-up and the
median of repeats (timing.py). Bandwidths count bytes read plus bytes written, in GB/s (1e9).
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from perflab.toolkit.bench.timing import median_ms, median_wall_s

GB = 1e9


@dataclass(frozen=True)
class Plan:
    dram_bytes: int        # per buffer, well beyond L2
    copy_bytes: int        # host<->device transfer size
    matmul_n: int
    fp32_n: int
    repeats: int
    disk_bytes: int
    launches: int


QUICK = Plan(dram_bytes=512 << 20, copy_bytes=64 << 20, matmul_n=8192, fp32_n=4096, repeats=10,
             disk_bytes=256 << 20, launches=2000)
FULL = Plan(dram_bytes=2 << 30, copy_bytes=512 << 20, matmul_n=8192, fp32_n=8192, repeats=30,
            disk_bytes=1 << 30, launches=20000)


def result(value: float, unit: str, method: str, samples: list[float] | None = None, **extra) -> dict:
    out = {"value": round(float(value), 3), "unit": unit, "method": method}
    if samples:
        out["repeats"] = len(samples)
        out["spread_pct"] = round(100 * (max(samples) - min(samples)) / max(min(samples), 1e-12), 1)
    out.update(extra)
    return out


class CupyKernels:
    """The NVRTC-compiled kernels of kernels.py, and the device facts their grids are sized from."""

    def __init__(self) -> None:
        import cupy

        from perflab.toolkit.bench.kernels import SOURCE

        self.cp = cupy
        self.module = cupy.RawModule(code=SOURCE, options=("-std=c++17",))
        self.sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
        self.l2_bytes = cupy.cuda.Device().attributes["L2CacheSize"]

    def fn(self, name: str):
        return self.module.get_function(name)


def dram_copy(k: CupyKernels, plan: Plan) -> dict:
    """Best of two copy kernels at several grid sizes and the driver's device-to-device memcpy."""
    cp = k.cp
    n = plan.dram_bytes // 16
    src = cp.random.randint(0, 2**31 - 1, size=n * 4, dtype=cp.int32)
    dst = cp.empty_like(src)
    variants = {}
    for name in ("copy16", "copy16_cs8"):
        fn = k.fn(name)
        for blocks_per_sm in (4, 8, 16):
            grid = k.sms * blocks_per_sm
            variants[f"{name} kernel, 16-byte accesses, {blocks_per_sm} blocks/SM x 256"] = (
                lambda fn=fn, grid=grid: fn((grid,), (256,), (src, dst, cp.uint64(n))))
    variants["cudaMemcpyAsync device-to-device"] = lambda: dst.data.copy_from_device_async(src.data, n * 16)
    best = None
    for label, launch in variants.items():
        dst.fill(0)
        ms, samples = median_ms(launch, warmup=3, repeats=plan.repeats, backend="cupy")
        assert bool((dst[-1024:] == src[-1024:]).all()), f"{label} produced wrong data"
        gbps = 2 * n * 16 / (ms / 1e3) / GB
        if best is None or gbps > best[0]:
            best = (gbps, samples, label)
    gbps, samples, label = best
    return result(gbps, "GB/s", f"{n * 16 >> 20} MiB, bytes read + written; best of {len(variants)} variants: {label}",
                  samples)


def dram_read_smem(k: CupyKernels, plan: Plan) -> dict:
    cp = k.cp
    n = plan.dram_bytes // 16
    src = cp.random.randint(0, 2**31 - 1, size=n * 4, dtype=cp.int32)
    staged, cpasync = k.fn("read_to_smem_staged"), k.fn("read_to_smem_cpasync")
    variants = {
        "registers->st.shared, 4 x 16 B in flight per thread, 8 blocks/SM x 256":
            lambda: staged((k.sms * 8,), (256,), (src, cp.uint64(n))),
        "cp.async 16 B, 4-stage ring, 4 blocks/SM x 256":
            lambda: cpasync((k.sms * 4,), (256,), (src, cp.uint64(n)), shared_mem=4 * 2 * 256 * 16),
        "cp.async 16 B, 4-stage ring, 6 blocks/SM x 256":
            lambda: cpasync((k.sms * 6,), (256,), (src, cp.uint64(n)), shared_mem=4 * 2 * 256 * 16),
    }
    best = None
    for label, launch in variants.items():
        ms, samples = median_ms(launch, warmup=3, repeats=plan.repeats, backend="cupy")
        gbps = n * 16 / (ms / 1e3) / GB
        if best is None or gbps > best[0]:
            best = (gbps, samples, label)
    gbps, samples, label = best
    return result(gbps, "GB/s", f"DRAM -> shared memory, {n * 16 >> 20} MiB read; best of: {label}", samples)


def l2_read(k: CupyKernels, plan: Plan) -> dict:
    cp = k.cp
    nbytes = 1 << (max(k.l2_bytes // 4, 1 << 20).bit_length() - 1)  # a power of two, at most a quarter of L2
    n = nbytes // 16
    src = cp.random.randint(0, 2**31 - 1, size=n * 4, dtype=cp.int32)
    sink = cp.zeros(1, dtype=cp.int32)
    total = n * 256
    fn = k.fn("l2_read")
    grid = k.sms * 8
    ms, samples = median_ms(lambda: fn((grid,), (256,), (src, cp.uint64(n - 1), cp.uint64(total), sink)),
                            warmup=3, repeats=plan.repeats, backend="cupy")
    return result(total * 16 / (ms / 1e3) / GB, "GB/s",
                  f"ld.global.cg 16 B over a {nbytes >> 20} MiB buffer (L2 {k.l2_bytes >> 20} MiB), 256 passes", samples)


def launch_latency(k: CupyKernels, plan: Plan) -> dict:
    fn = k.fn("empty_kernel")
    count = plan.launches

    def launches():
        for _ in range(count):
            fn((1,), (32,), ())

    ms, samples = median_ms(launches, warmup=1, repeats=5, backend="cupy")
    return result(1e3 * ms / count, "us", f"{count} empty-kernel launches back to back (CuPy), device time / count",
                  samples)


def graph_replay(plan: Plan) -> dict:
    import torch

    x = torch.zeros(1, device="cuda")
    per_graph = 200
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            x.add_(1)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(per_graph):
            x.add_(1)
    ms, samples = median_ms(graph.replay, warmup=3, repeats=plan.repeats)
    return result(1e3 * ms / per_graph, "us", f"CUDA graph of {per_graph} one-element add_ kernels, replay time / kernel",
                  samples)


def torch_launch(plan: Plan) -> dict:
    import torch

    x = torch.zeros(1, device="cuda")
    count = plan.launches

    def launches():
        for _ in range(count):
            x.add_(1)

    ms, samples = median_ms(launches, warmup=1, repeats=5)
    return result(1e3 * ms / count, "us", f"{count} one-element torch add_ launches, device time / count", samples)


def host_copies(plan: Plan) -> dict[str, dict]:
    import torch

    n = plan.copy_bytes
    dev = torch.empty(n, dtype=torch.uint8, device="cuda")
    out = {}
    for kind, pinned in (("pinned", True), ("pageable", False)):
        host = torch.empty(n, dtype=torch.uint8, pin_memory=pinned)
        host.fill_(7)
        for direction, fn in (("h2d", lambda: dev.copy_(host, non_blocking=pinned)),
                              ("d2h", lambda: host.copy_(dev, non_blocking=pinned))):
            ms, samples = median_ms(fn, warmup=2, repeats=max(5, plan.repeats // 2))
            out[f"{direction}_{kind}"] = result(n / (ms / 1e3) / GB, "GB/s", f"{n >> 20} MiB {kind} tensor copy_", samples)
    return out


def matmuls(plan: Plan) -> dict[str, dict]:
    import torch

    out = {}
    prev_tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        for name in ("bf16", "fp16", "fp8_e4m3", "tf32", "fp32"):
            n = plan.fp32_n if name in ("tf32", "fp32") else plan.matmul_n
            try:
                fn, label = _matmul_fn(torch, name, n)
                ms, samples = median_ms(fn, warmup=3, repeats=plan.repeats)
                out[f"matmul_{name}"] = result(2 * n**3 / (ms / 1e3) / 1e12, "TFLOP/s", label, samples)
            except Exception as exc:  # one unsupported dtype must not sink the others
                out[f"matmul_{name}"] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"}
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev_tf32
    return out


def _matmul_fn(torch, name: str, n: int):
    gen = torch.Generator(device="cuda").manual_seed(0)
    if name == "fp8_e4m3":
        a = torch.randn(n, n, device="cuda", generator=gen).to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device="cuda", generator=gen).to(torch.float8_e4m3fn)  # N x K, passed transposed
        one = torch.ones((), device="cuda")
        return (lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
                f"torch._scaled_mm e4m3 x e4m3 -> bf16, {n}^3, random data")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32, "fp32": torch.float32}[name]
    torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
    a = torch.randn(n, n, device="cuda", dtype=dtype, generator=gen)
    b = torch.randn(n, n, device="cuda", dtype=dtype, generator=gen)
    c = torch.empty(n, n, device="cuda", dtype=dtype)
    allow = name == "tf32"

    def run():
        torch.backends.cuda.matmul.allow_tf32 = allow
        torch.matmul(a, b, out=c)

    return run, f"torch.matmul {name}, {n}^3, random data"


def disk(plan: Plan, folder: Path) -> dict[str, dict]:
    folder.mkdir(parents=True, exist_ok=True)
    chunk = os.urandom(8 << 20)
    count = max(1, plan.disk_bytes // len(chunk))
    fd, name = tempfile.mkstemp(prefix="perflab-bench-", dir=folder)
    os.close(fd)
    path = Path(name)
    try:
        def write():
            with open(path, "wb", buffering=0) as f:
                for _ in range(count):
                    f.write(chunk)
                os.fsync(f.fileno())

        def read():
            with open(path, "rb", buffering=0) as f:
                if hasattr(os, "posix_fadvise"):
                    os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
                while f.read(16 << 20):
                    pass

        size = count * len(chunk)
        w, ws = median_wall_s(write, repeats=3)
        r, rs = median_wall_s(read, repeats=3)
        where = f"{size >> 20} MiB file in {folder}"
        return {"disk_write": result(size / w / GB, "GB/s", f"write + fsync, {where}", ws),
                "disk_read": result(size / r / GB, "GB/s", f"read after dropping its pages (fadvise), {where}", rs)}
    finally:
        path.unlink(missing_ok=True)
