"""Latency vs throughput over batch sizes (week 7, exercise 5): the sweep, its knee, its plot.

`sweep(forward, make_batch, batches, device=...)` times one model call per batch size two ways:
- latency: one call alone, the device drained before and after (what one request batch waits);
- throughput: `pipeline` calls issued back to back, then one drain (the steady state of a busy
  server, where the host launches the next call while the GPU runs this one).
CUDA events on a GPU, perf_counter on the CPU. `knee(points)` is the smallest batch whose
throughput reaches `frac` (default 80 %) of the best throughput measured. torch and matplotlib are
imported lazily.
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any, Callable

from perflab.errors import PerflabError

KNEE_FRACTION = 0.8
SCHEMA = "perflab.batch-sweep/1"


def _timer(device: str) -> Callable[[Callable[[], Any]], float]:
    """A function that runs `fn` once between two drains of the device and returns milliseconds."""
    if str(device).startswith("cuda"):
        import torch

        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def cuda_ms(fn: Callable[[], Any]) -> float:
            torch.cuda.synchronize()
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end)

        return cuda_ms

    def cpu_ms(fn: Callable[[], Any]) -> float:
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3

    return cpu_ms


def sweep(forward: Callable[[Any], Any], make_batch: Callable[[int], Any], batches: list[int], *,
          device: str, reps: int = 15, pipeline: int = 8, warmup: int = 3) -> list[dict[str, float]]:
    """One point per batch size: batch, latency_ms (median), forward_ms (pipelined, per call),
    throughput (items/s from the pipelined time)."""
    if not batches or any(int(b) < 1 for b in batches):
        raise PerflabError("batch sizes must be positive integers")
    timed = _timer(device)
    points = []
    for b in batches:
        x = make_batch(int(b))
        for _ in range(warmup):
            timed(lambda: forward(x))
        latency = statistics.median(timed(lambda: forward(x)) for _ in range(reps))

        def burst() -> None:
            for _ in range(pipeline):
                forward(x)

        per_call = statistics.median(timed(burst) for _ in range(max(3, reps // 3))) / pipeline
        points.append({"batch": int(b), "latency_ms": float(latency), "forward_ms": float(per_call),
                       "throughput": float(b / (per_call / 1e3)) if per_call > 0 else 0.0})
    return points


def knee(points: list[dict[str, float]], frac: float = KNEE_FRACTION) -> dict[str, float]:
    """The smallest batch whose throughput reaches `frac` of the best throughput in the sweep."""
    if not points:
        raise PerflabError("the sweep has no points")
    if not 0.0 < frac <= 1.0:
        raise PerflabError(f"knee fraction {frac} must be in (0, 1]")
    best = max(p["throughput"] for p in points)
    ordered = sorted(points, key=lambda p: p["batch"])
    return next(p for p in ordered if p["throughput"] >= frac * best)


def point(points: list[dict[str, float]], batch: int) -> dict[str, float]:
    for p in points:
        if p["batch"] == batch:
            return p
    raise PerflabError(f"the sweep has no batch {batch} (batches: {', '.join(str(p['batch']) for p in points)})")


def plot(result: dict[str, Any], path: Path, title: str = "") -> Path:
    """Latency and throughput vs batch size (log2 x), the knee marked; a PNG at `path`."""
    from perflab.report.plotting import pyplot

    plt = pyplot()
    pts = sorted(result["points"], key=lambda p: p["batch"])
    k = knee(pts, result.get("knee_fraction", KNEE_FRACTION))
    b = [p["batch"] for p in pts]
    fig, (ax1, ax3) = plt.subplots(1, 2, figsize=(11, 4.2))
    ax1.set_xscale("log", base=2)
    ax1.plot(b, [p["latency_ms"] for p in pts], "o-", color="tab:red", label="latency (one call)")
    ax1.set_yscale("log")
    ax1.set_xlabel("batch size")
    ax1.set_ylabel("latency per call (ms)", color="tab:red")
    ax2 = ax1.twinx()
    ax2.plot(b, [p["throughput"] for p in pts], "s-", color="tab:blue", label="throughput")
    ax2.set_ylabel("throughput (requests/s)", color="tab:blue")
    ax1.axvline(k["batch"], color="gray", ls="--")
    ax1.annotate(f"knee: batch {k['batch']}", (k["batch"], k["latency_ms"]), textcoords="offset points",
                 xytext=(6, 10), color="gray")
    ax1.set_title("latency and throughput vs batch size")
    ax3.plot([p["throughput"] for p in pts], [p["latency_ms"] for p in pts], "o-", color="tab:purple")
    for p in pts:
        ax3.annotate(str(p["batch"]), (p["throughput"], p["latency_ms"]), textcoords="offset points",
                     xytext=(4, 4), fontsize=7)
    ax3.plot([k["throughput"]], [k["latency_ms"]], "o", ms=12, mfc="none", mec="gray")
    ax3.set_xlabel("throughput (requests/s)")
    ax3.set_ylabel("latency per call (ms)")
    ax3.set_yscale("log")
    ax3.set_title("latency vs throughput (labels: batch size)")
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
