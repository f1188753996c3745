"""Bootstrap CIs and early stopping, checked against known distributions with fixed seeds."""

from __future__ import annotations

import numpy as np
import pytest

from specd.errors import UsageError
from specd.tune.stats import (
    Summary,
    bootstrap_ci,
    cis_separated,
    coefficient_of_variation,
    median,
    should_stop_early,
    summarize,
)


def normal(mean: float, sd: float, n: int, seed: int) -> list[float]:
    return [float(x) for x in np.random.default_rng(seed).normal(mean, sd, n)]


def test_median() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 2.0, 3.0]) == 2.5


def test_empty_and_nan_are_usage_errors() -> None:
    with pytest.raises(UsageError, match="no samples"):
        median([])
    with pytest.raises(UsageError, match="NaN"):
        summarize([1.0, float("nan")])
    with pytest.raises(UsageError):
        bootstrap_ci([1.0, 2.0], confidence=1.5)


def test_ci_brackets_the_true_median_and_is_narrow() -> None:
    lo, hi = bootstrap_ci(normal(100.0, 10.0, 400, seed=1))
    assert lo < 100.0 < hi
    assert hi - lo < 4.0


def test_ci_is_reproducible_and_depends_on_seed() -> None:
    data = normal(50.0, 5.0, 30, seed=2)
    assert bootstrap_ci(data, seed=7) == bootstrap_ci(data, seed=7)

    def mean(a: np.ndarray) -> float:
        return float(np.mean(a))

    assert bootstrap_ci(data, stat=mean, seed=7) != bootstrap_ci(data, stat=mean, seed=8)


def test_ci_width_shrinks_with_more_samples() -> None:
    lo_small, hi_small = bootstrap_ci(normal(0.0, 1.0, 10, seed=3))
    lo_big, hi_big = bootstrap_ci(normal(0.0, 1.0, 1000, seed=3))
    assert hi_big - lo_big < (hi_small - lo_small) / 3


def test_coverage_is_near_nominal() -> None:
    """Over many data sets the 90% interval should contain the true median about 90% of the time."""
    hits = 0
    trials = 200
    for seed in range(trials):
        lo, hi = bootstrap_ci(normal(10.0, 2.0, 40, seed=1000 + seed), confidence=0.9, n_resamples=400)
        hits += lo <= 10.0 <= hi
    assert 0.82 <= hits / trials <= 0.97


def test_custom_stat() -> None:
    data = normal(5.0, 1.0, 200, seed=4)
    lo, hi = bootstrap_ci(data, stat=lambda a: float(np.mean(a)))
    assert lo < float(np.mean(data)) < hi


def test_single_sample_gives_a_point_interval() -> None:
    assert bootstrap_ci([42.0]) == (42.0, 42.0)
    summary = summarize([42.0])
    assert summary == Summary(n=1, median=42.0, ci_lo=42.0, ci_hi=42.0, cv=0.0, high_variance=False)


def test_summary_flags_high_variance() -> None:
    steady = summarize(normal(100.0, 5.0, 50, seed=5))
    noisy = summarize([float(x) for x in np.random.default_rng(6).exponential(100.0, 50)])
    assert steady.n == 50 and not steady.high_variance and steady.cv < 0.1
    assert noisy.high_variance and noisy.cv > 0.25
    assert steady.ci_lo <= steady.median <= steady.ci_hi


def test_cv() -> None:
    assert coefficient_of_variation([2.0, 2.0, 2.0]) == 0.0
    assert coefficient_of_variation([1.0, 3.0]) == pytest.approx(np.std([1.0, 3.0], ddof=1) / 2.0)


def test_separation() -> None:
    fast = summarize(normal(100.0, 5.0, 30, seed=7))
    slow = summarize(normal(150.0, 5.0, 30, seed=8))
    twin = summarize(normal(100.0, 5.0, 30, seed=9))
    assert cis_separated(fast, slow) and cis_separated(slow, fast)
    assert not cis_separated(fast, twin)


def test_stop_early_needs_min_n() -> None:
    cells = {"plain": summarize([100.0, 101.0, 99.0]), "mtp": summarize([200.0, 201.0, 199.0])}
    assert not should_stop_early(cells, min_n=5, profile="plain")
    assert should_stop_early(cells, min_n=3, profile="plain")
    assert should_stop_early(cells, min_n=3)


def test_stop_early_needs_separation_from_every_rival() -> None:
    cells = {
        "plain": summarize(normal(100.0, 5.0, 20, seed=10)),
        "mtp": summarize(normal(160.0, 5.0, 20, seed=11)),
        "dflash": summarize(normal(161.0, 5.0, 20, seed=12)),
    }
    assert should_stop_early(cells, min_n=5, profile="plain")
    assert not should_stop_early(cells, min_n=5, profile="mtp")
    assert not should_stop_early(cells, min_n=5)


def test_lone_profile_stops_at_min_n_and_unknown_profile_errors() -> None:
    cells = {"plain": summarize([1.0, 2.0])}
    assert should_stop_early(cells, min_n=2)
    assert not should_stop_early({}, min_n=2)
    with pytest.raises(UsageError, match="nope"):
        should_stop_early(cells, min_n=2, profile="nope")
