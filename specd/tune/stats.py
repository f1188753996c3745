"""Medians with bootstrap confidence intervals, and when a benchmark has seen enough.

Seed 002's lesson: single runs misled by 1.5x to 4x, so every bench number specd reports is a
median with a CI, and a cell stops sampling only once its CI no longer overlaps any rival's.
Pure functions over sequences of floats; the resampling is seeded so a report is reproducible.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from specd.errors import UsageError

HIGH_VARIANCE_CV = 0.25

Stat = Callable[[NDArray[np.float64]], float]


def _as_array(samples: Sequence[float] | NDArray[np.float64]) -> NDArray[np.float64]:
    values = np.asarray(samples, dtype=np.float64)
    if values.ndim != 1 or values.size == 0:
        raise UsageError("no samples to summarise", hint="run the benchmark cell at least once")
    if not np.all(np.isfinite(values)):
        raise UsageError("samples contain NaN or infinite values")
    return values


def median(samples: Sequence[float] | NDArray[np.float64]) -> float:
    """Median: robust to the one slow outlier a warm-up or a GC pause leaves in a bench cell."""
    return float(np.median(_as_array(samples)))


def bootstrap_ci(
    samples: Sequence[float] | NDArray[np.float64],
    stat: Stat = median,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile-bootstrap interval of `stat`; one sample gives a zero-width interval at it."""
    if not 0.0 < confidence < 1.0:
        raise UsageError(f"confidence must be between 0 and 1, not {confidence}")
    if n_resamples < 1:
        raise UsageError(f"n_resamples must be at least 1, not {n_resamples}")
    values = _as_array(samples)
    if values.size == 1:
        point = float(stat(values))
        return point, point
    rng = np.random.default_rng(seed)
    resamples = values[rng.integers(0, values.size, size=(n_resamples, values.size))]
    if stat is median:
        estimates = np.median(resamples, axis=1)
    else:
        estimates = np.array([stat(row) for row in resamples], dtype=np.float64)
    tail = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(estimates, [tail, 1.0 - tail])
    return float(lo), float(hi)


@dataclass(frozen=True)
class Summary:
    """What a bench cell reports: n, median, CI and whether it is too noisy to trust alone."""

    n: int
    median: float
    ci_lo: float
    ci_hi: float
    cv: float
    high_variance: bool


def coefficient_of_variation(samples: Sequence[float] | NDArray[np.float64]) -> float:
    """Sample std / mean; 0 for a single sample (no spread seen yet)."""
    values = _as_array(samples)
    if values.size < 2:
        return 0.0
    mean = float(np.mean(values))
    std = float(np.std(values, ddof=1))
    if mean == 0.0:
        return 0.0 if std == 0.0 else float("inf")
    return abs(std / mean)


def summarize(
    samples: Sequence[float] | NDArray[np.float64],
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> Summary:
    values = _as_array(samples)
    lo, hi = bootstrap_ci(values, median, confidence, n_resamples, seed)
    cv = coefficient_of_variation(values)
    return Summary(
        n=int(values.size), median=median(values), ci_lo=lo, ci_hi=hi, cv=cv,
        high_variance=cv > HIGH_VARIANCE_CV,
    )


def cis_separated(a: Summary, b: Summary) -> bool:
    """True when the intervals do not overlap, i.e. the ranking of a and b is settled."""
    return a.ci_hi < b.ci_lo or b.ci_hi < a.ci_lo


def should_stop_early(cells: Mapping[str, Summary], min_n: int, profile: str | None = None) -> bool:
    """Whether benchmarking may stop at one workload cell.

    `cells` maps each profile to its summary at the same workload cell. With `profile`, answer
    for that profile's cell: it has at least `min_n` samples and its CI is separated from every
    other profile's. Without, answer for the whole workload cell: every profile may stop.
    A lone profile has nobody to be separated from, so it stops at `min_n`.
    """
    if min_n < 1:
        raise UsageError(f"min_n must be at least 1, not {min_n}")
    if profile is None:
        return bool(cells) and all(should_stop_early(cells, min_n, name) for name in cells)
    if profile not in cells:
        raise UsageError(f"no bench cell for profile {profile!r}", hint=f"known: {', '.join(sorted(cells))}")
    own = cells[profile]
    if own.n < min_n:
        return False
    return all(cis_separated(own, other) for name, other in cells.items() if name != profile)
