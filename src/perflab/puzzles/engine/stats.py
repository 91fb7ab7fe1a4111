"""Speed-up statistics for the fix checker. Pure: no torch, no clocks of its own.

Timings come from callables that run one sample and return its duration in ms, so tests can feed
synthetic timings (a fake clock) and the checker feeds CUDA events or perf_counter.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:  # numpy loads with the first statistic, not with the puzzle catalog
    import numpy as np

Sample = Callable[[], float]


@dataclass(frozen=True)
class SpeedupResult:
    point: float       # statistic(slow) / statistic(fast)
    ci_low: float
    ci_high: float
    bar: float
    passed: bool       # ci_low >= bar
    n: int
    statistic: str
    confidence: float

    def to_dict(self) -> dict:
        return asdict(self)


def time_interleaved(slow: Sample, fast: Sample, reps: int, warmup: int = 3) -> tuple[list[float], list[float]]:
    """ABAB...: warm both up, then alternate so drift (clocks, thermals, neighbours) hits both alike."""
    for _ in range(warmup):
        slow()
        fast()
    a: list[float] = []
    b: list[float] = []
    for _ in range(reps):
        a.append(float(slow()))
        b.append(float(fast()))
    return a, b


def time_until_decided(slow: Sample, fast: Sample, reps: int, bar: float, *, max_rounds: int = 3,
                       warmup: int = 1) -> tuple[list[float], list[float]]:
    """time_interleaved in rounds of `reps` pairs, adding a round (at most max_rounds) while the interval of
    slow/fast straddles the bar: an effect near the bar on a noisy machine gets more samples, a clear one
    does not. (A few looks at most: the optional stopping barely moves a 95 % interval.)"""
    a, b = time_interleaved(slow, fast, reps, warmup=warmup)
    for _ in range(max_rounds - 1):
        v = speedup_verdict(a, b, bar)
        if v.ci_low >= bar or v.ci_high < bar:
            break
        more_a, more_b = time_interleaved(slow, fast, reps, warmup=0)
        a += more_a
        b += more_b
    return a, b


def bootstrap_ratio(slow: list[float] | np.ndarray, fast: list[float] | np.ndarray, *, statistic: str = "median",
                    paired: bool = True, confidence: float = 0.95, resamples: int = 4000,
                    seed: int = 0) -> tuple[float, float, float]:
    """Point estimate and percentile bootstrap interval of statistic(slow) / statistic(fast).

    Paired resampling keeps each interleaved (slow, fast) pair together, which cancels drift that
    hits both; unpaired resamples the two samples independently. The RNG has a fixed seed so the
    same timings always give the same verdict.
    """
    import numpy as np

    s = np.asarray(slow, dtype=float)
    f = np.asarray(fast, dtype=float)
    if s.size < 2 or f.size < 2:
        raise ValueError("need at least two timings of each side")
    if np.any(s <= 0) or np.any(f <= 0):
        raise ValueError("timings must be positive")
    if paired and s.size != f.size:
        raise ValueError("paired bootstrap needs as many slow as fast timings")
    stat = {"median": np.median, "mean": np.mean}[statistic]
    rng = np.random.default_rng(seed)
    idx_s = rng.integers(0, s.size, size=(resamples, s.size))
    idx_f = idx_s if paired else rng.integers(0, f.size, size=(resamples, f.size))
    ratios = stat(s[idx_s], axis=1) / stat(f[idx_f], axis=1)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(ratios, [alpha, 1.0 - alpha])
    return float(stat(s) / stat(f)), float(low), float(high)


def speedup_verdict(slow: list[float], fast: list[float], bar: float, *, statistic: str = "median",
                    paired: bool = True, confidence: float = 0.95, seed: int = 0) -> SpeedupResult:
    """Pass only when the lower bound of the interval clears the bar."""
    point, low, high = bootstrap_ratio(slow, fast, statistic=statistic, paired=paired, confidence=confidence,
                                       seed=seed)
    return SpeedupResult(point=point, ci_low=low, ci_high=high, bar=float(bar), passed=low >= bar,
                         n=len(slow), statistic=statistic, confidence=confidence)


def inner_repeats(step_ms: float, target_ms: float = 2.0, cap: int = 1000) -> int:
    """Steps per timing sample so that one sample lasts about target_ms (timer resolution, launch jitter)."""
    if step_ms <= 0:
        return cap
    return int(min(cap, max(1, round(target_ms / step_ms))))


def summary(samples: list[float]) -> dict:
    import numpy as np

    arr = np.asarray(samples, dtype=float)
    return {"median_ms": float(np.median(arr)), "mean_ms": float(np.mean(arr)), "min_ms": float(np.min(arr)),
            "n": int(arr.size), "samples_ms": [round(float(x), 6) for x in arr]}
