"""A fitted performance model per profile: predict wall clock for traffic that was never benched.

Bench cells cover a few (class, prompt length, output length) points; the tuner has to rank
profiles on the traffic mix actually seen. Seed 002 shows why a single rate is not enough: a
drafter's decode rate collapses with output length (DFlash 46.9 -> 30.1 tok/s) and speculation
taxes prefill, so the wall-clock winner flips at an output length. The model is therefore:
prefill rate vs prompt length and decode rate vs output length, each piecewise-linear through
per-bin medians (robust, no curve family assumed), a per-task-class decode factor, a per-
concurrency decode factor and a fixed per-request overhead. Pure; numpy only.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from specd.errors import UsageError
from specd.traffic.taskclass import TASK_CLASSES, TaskClass

Points = tuple[tuple[float, float], ...]
_FIT_ROUNDS = 4


@dataclass(frozen=True)
class Sample:
    """One benchmarked request. prompt_tokens counts the tokens actually evaluated (timings.prompt_n)."""

    profile: str
    task_class: TaskClass
    prompt_tokens: int
    output_tokens: int
    prefill_ms: float
    decode_ms: float
    wall_ms: float
    draft_n: int | None = None
    draft_accepted: int | None = None
    concurrency: int = 1


@dataclass(frozen=True)
class MixItem:
    """One shape of request in a traffic mix, with its share (weights need not sum to 1)."""

    task_class: TaskClass
    prompt_tokens: int
    output_tokens: int
    weight: float = 1.0


@dataclass(frozen=True)
class PerfModel:
    profile: str
    prefill_points: Points  # (prompt tokens, tokens/s)
    decode_points: Points  # (output tokens, tokens/s) for a class factor of 1
    class_factor: Mapping[TaskClass, float]  # 1.0 for classes never benched
    concurrency_factor: Points  # (requests in flight, decode multiplier); (1, 1.0) when only solo runs
    overhead_ms: float
    acceptance: Mapping[TaskClass, float]  # draft acceptance per class, where drafts were seen
    n_samples: int
    classes_seen: tuple[TaskClass, ...]


@dataclass(frozen=True)
class Crossover:
    output_tokens: int
    below: str  # profile that wins for shorter outputs
    above: str
    sentence: str


def _interp(points: Points, x: float) -> float:
    xs, ys = zip(*points, strict=True)
    return float(np.interp(x, xs, ys))


def _bucket(value: float) -> int:
    """Power-of-two bins: output and prompt lengths span three orders of magnitude."""
    return math.floor(math.log2(max(value, 1.0)))


def _binned_medians(xs: Sequence[float], ys: Sequence[float]) -> Points:
    groups: dict[int, tuple[list[float], list[float]]] = {}
    for x, y in zip(xs, ys, strict=True):
        bucket_x, bucket_y = groups.setdefault(_bucket(x), ([], []))
        bucket_x.append(x)
        bucket_y.append(y)
    points = [(float(np.median(gx)), float(np.median(gy))) for _, (gx, gy) in sorted(groups.items())]
    return tuple(points)


def _geomean(values: Sequence[float], weights: Sequence[float]) -> float:
    return float(np.exp(np.average(np.log(values), weights=weights)))


def fit(samples: Sequence[Sample], profile: str | None = None) -> PerfModel:
    """Fit one profile's model; `profile` picks it out of a mixed list, else all must share one."""
    chosen = [s for s in samples if profile is None or s.profile == profile]
    names = sorted({s.profile for s in chosen})
    if not chosen:
        raise UsageError(f"no bench samples for profile {profile!r}" if profile
                         else "no bench samples to fit")
    if len(names) > 1:
        raise UsageError(f"samples from several profiles ({', '.join(names)}); fit them one at a time")
    prefill = [s for s in chosen if s.prompt_tokens > 0 and s.prefill_ms > 0]
    decode = [s for s in chosen if s.output_tokens > 0 and s.decode_ms > 0]
    if not prefill or not decode:
        raise UsageError(f"profile {names[0]!r}: samples lack prefill or decode timings; cannot fit a model")

    prefill_points = _binned_medians([s.prompt_tokens for s in prefill],
                                     [1000.0 * s.prompt_tokens / s.prefill_ms for s in prefill])
    base_k = min(s.concurrency for s in decode)
    solo = [s for s in decode if s.concurrency == base_k]
    rates = {id(s): 1000.0 * s.output_tokens / s.decode_ms for s in decode}
    factors: dict[TaskClass, float] = dict.fromkeys(TASK_CLASSES, 1.0)
    decode_points: Points = ()
    for _ in range(_FIT_ROUNDS):  # alternate curve and class factors; converges in a couple of rounds
        decode_points = _binned_medians([s.output_tokens for s in solo],
                                        [rates[id(s)] / factors[s.task_class] for s in solo])
        seen = sorted({s.task_class for s in solo}, key=TASK_CLASSES.index)
        for task_class in seen:
            factors[task_class] = float(np.median([rates[id(s)] / _interp(decode_points, s.output_tokens)
                                                   for s in solo if s.task_class == task_class]))
        norm = _geomean([factors[c] for c in seen], [sum(s.task_class == c for s in solo) for c in seen])
        factors = {c: (f / norm if c in seen else 1.0) for c, f in factors.items()}

    concurrency = [(float(base_k), 1.0)]
    for k in sorted({s.concurrency for s in decode} - {base_k}):
        ratios = [rates[id(s)] / (_interp(decode_points, s.output_tokens) * factors[s.task_class])
                  for s in decode if s.concurrency == k]
        concurrency.append((float(k), float(np.median(ratios))))
    overheads = [s.wall_ms - s.prefill_ms - s.decode_ms for s in chosen]
    acceptance: dict[TaskClass, float] = {}
    for task_class in TASK_CLASSES:
        drafted = sum(s.draft_n or 0 for s in chosen if s.task_class == task_class)
        if drafted:
            accepted = sum(s.draft_accepted or 0 for s in chosen if s.task_class == task_class)
            acceptance[task_class] = accepted / drafted
    return PerfModel(
        profile=names[0], prefill_points=prefill_points, decode_points=decode_points, class_factor=factors,
        concurrency_factor=tuple(concurrency), overhead_ms=max(0.0, float(np.median(overheads))),
        acceptance=acceptance, n_samples=len(chosen),
        classes_seen=tuple(c for c in TASK_CLASSES if any(s.task_class == c for s in chosen)),
    )


def fit_all(samples: Sequence[Sample]) -> dict[str, PerfModel]:
    """One model per profile present in the samples."""
    return {name: fit(samples, name) for name in sorted({s.profile for s in samples})}


def predict_prefill_ms(model: PerfModel, prompt_tokens: int) -> float:
    return 1000.0 * prompt_tokens / _interp(model.prefill_points, prompt_tokens) if prompt_tokens > 0 else 0.0


def predict_decode_ms(model: PerfModel, output_tokens: int, task_class: TaskClass,
                      concurrency: int = 1) -> float:
    if output_tokens <= 0:
        return 0.0
    rate = _interp(model.decode_points, output_tokens) * model.class_factor[task_class]
    return 1000.0 * output_tokens / (rate * _interp(model.concurrency_factor, concurrency))


def predict_wall_ms(model: PerfModel, prompt_tokens: int, output_tokens: int, task_class: TaskClass,
                    concurrency: int = 1) -> float:
    """Wall clock of one request: overhead + prefill + decode."""
    return (model.overhead_ms + predict_prefill_ms(model, prompt_tokens)
            + predict_decode_ms(model, output_tokens, task_class, concurrency))


def expected_wall_ms(model: PerfModel, mix: Sequence[MixItem], concurrency: int = 1) -> float:
    """Weighted mean wall clock over a traffic mix: the number the tuner ranks profiles by."""
    total = sum(item.weight for item in mix)
    if not mix or total <= 0:
        raise UsageError("the traffic mix is empty (or all weights are zero)")
    return sum(item.weight * predict_wall_ms(model, item.prompt_tokens, item.output_tokens, item.task_class,
                                             concurrency) for item in mix) / total


def crossover_output_tokens(model_a: PerfModel, model_b: PerfModel, task_class: TaskClass, prompt_tokens: int,
                            max_output_tokens: int = 8192) -> Crossover | None:
    """The first output length at which the faster of the two changes, or None if one always wins."""
    def diff(out: int) -> float:
        return (predict_wall_ms(model_a, prompt_tokens, out, task_class)
                - predict_wall_ms(model_b, prompt_tokens, out, task_class))

    grid = sorted({1, *range(16, max_output_tokens + 1, 16), max_output_tokens})
    start = diff(grid[0])
    for lo, hi in itertools.pairwise(grid):
        if (diff(hi) < 0) != (start < 0) and diff(hi) != 0:
            while hi - lo > 1:  # the sign changes inside (lo, hi]: bisect to the first token where it has
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if (diff(mid) < 0) == (start < 0) else (lo, mid)
            names = (model_a.profile, model_b.profile)
            below, above = names if start < 0 else names[::-1]
            sentence = (f"{below} wins below {hi} output tokens, {above} above "
                        f"({task_class}, {prompt_tokens}-token prompts)")
            return Crossover(output_tokens=hi, below=below, above=above, sentence=sentence)
    return None
