"""The checker's statistics on synthetic timings: noise never passes, a clear 2x does."""
import numpy as np
import pytest

from perflab.puzzles.engine import stats


def noisy(rng, n, median_ms, sigma=0.25):
    return list(median_ms * rng.lognormal(0.0, sigma, size=n))


def test_noisy_non_improvement_never_passes():
    """Same distribution on both sides, 25 % noise: 150 tries, never past a 1.1 bar (so past no higher bar)."""
    rng = np.random.default_rng(1)
    for _ in range(150):
        slow, fast = noisy(rng, 30, 10.0), noisy(rng, 30, 10.0)
        v = stats.speedup_verdict(slow, fast, 1.1)
        assert not v.passed and v.ci_low < 1.1


def test_lucky_outliers_do_not_make_a_speedup():
    """A few very fast samples (a cached result, a lucky clock) must not move the median-based verdict."""
    rng = np.random.default_rng(2)
    for _ in range(60):
        slow = noisy(rng, 30, 10.0, 0.1)
        fast = noisy(rng, 30, 10.0, 0.1)
        fast[:5] = [0.5] * 5
        assert not stats.speedup_verdict(slow, fast, 1.2).passed


def test_clear_2x_passes():
    rng = np.random.default_rng(3)
    for _ in range(60):
        slow, fast = noisy(rng, 30, 10.0, 0.15), noisy(rng, 30, 5.0, 0.15)
        v = stats.speedup_verdict(slow, fast, 1.5)
        assert v.passed and v.ci_low <= v.point <= v.ci_high and 1.5 < v.point < 2.7


def test_pairing_cancels_shared_drift():
    """Both sides slow down 3x over the run (thermals, a neighbour): paired resampling still sees 2x."""
    rng = np.random.default_rng(4)
    drift = np.linspace(1.0, 3.0, 30)
    slow = 10.0 * drift * rng.lognormal(0, 0.03, 30)
    fast = 5.0 * drift * rng.lognormal(0, 0.03, 30)
    paired = stats.speedup_verdict(list(slow), list(fast), 1.8, paired=True)
    unpaired = stats.speedup_verdict(list(slow), list(fast), 1.8, paired=False)
    assert paired.passed and paired.ci_low > unpaired.ci_low
    assert (paired.ci_high - paired.ci_low) < (unpaired.ci_high - unpaired.ci_low)


def test_bar_is_compared_with_the_lower_bound_not_the_point():
    slow = [4.0, 6.0, 8.0, 8.5, 9.0, 11.0, 14.0, 16.0]  # median 8.75: 1.75x on the median, widely spread
    fast = [5.0, 5.1, 4.9, 5.0, 5.2, 4.8, 5.0, 5.0]
    v = stats.speedup_verdict(slow, fast, 1.5)
    assert v.point > 1.5 and v.ci_low < 1.5 and not v.passed


def test_deterministic_and_mean_statistic():
    rng = np.random.default_rng(6)
    slow, fast = noisy(rng, 20, 10.0), noisy(rng, 20, 4.0)
    assert stats.speedup_verdict(slow, fast, 2.0) == stats.speedup_verdict(slow, fast, 2.0)
    m = stats.speedup_verdict(slow, fast, 2.0, statistic="mean")
    assert m.point == pytest.approx(np.mean(slow) / np.mean(fast))


def test_bad_timings_are_refused():
    with pytest.raises(ValueError, match="positive"):
        stats.bootstrap_ratio([1.0, 0.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="as many"):
        stats.bootstrap_ratio([1.0, 1.0, 1.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="at least two"):
        stats.bootstrap_ratio([1.0], [1.0])


def test_time_interleaved_alternates_after_warmup():
    calls = []
    clock = iter(range(1, 1000))

    def sample(name):
        def run():
            calls.append(name)
            return float(next(clock))
        return run

    slow, fast = stats.time_interleaved(sample("A"), sample("B"), reps=3, warmup=2)
    assert calls == ["A", "B"] * 5
    assert slow == [5.0, 7.0, 9.0] and fast == [6.0, 8.0, 10.0]  # warm-up samples dropped


def test_inner_repeats():
    assert stats.inner_repeats(0.01, 2.0) == 200
    assert stats.inner_repeats(5.0, 2.0) == 1
    assert stats.inner_repeats(0.0) == 1000


def _samplers(rng, slow_ms, fast_ms, sigma):
    calls = {"n": 0}

    def slow():
        calls["n"] += 1
        return float(slow_ms * rng.lognormal(0.0, sigma))

    def fast():
        return float(fast_ms * rng.lognormal(0.0, sigma))
    return slow, fast, calls


def test_a_clear_result_takes_one_round():
    rng = np.random.default_rng(3)
    slow, fast, calls = _samplers(rng, 10.0, 10.2, 0.02)   # a 2 % cost, quiet machine, bar 10 %
    a, b = stats.time_until_decided(slow, fast, 40, 1 / 1.1)
    assert len(a) == len(b) == 40 and stats.speedup_verdict(a, b, 1 / 1.1).passed


def test_an_undecided_result_gets_more_rounds_and_never_more_than_three():
    rng = np.random.default_rng(4)
    slow, fast, calls = _samplers(rng, 10.0, 10.9, 0.3)    # a 9 % cost against a 10 % bar, very noisy
    a, b = stats.time_until_decided(slow, fast, 40, 1 / 1.1)
    assert len(a) == len(b) == 120 and calls["n"] == 121   # 1 warm-up, 3 rounds of 40


def test_more_rounds_do_not_pass_a_cost_above_the_bar():
    """A 20 % cost with 25 % noise, bar 10 %: the extra rounds must not turn it into a pass."""
    rng = np.random.default_rng(5)
    passes = 0
    for _ in range(100):
        slow, fast, _ = _samplers(rng, 10.0, 12.0, 0.25)
        passes += stats.speedup_verdict(*stats.time_until_decided(slow, fast, 20, 1 / 1.1), 1 / 1.1).passed
    assert passes <= 3
