"""Batch-size-aware choice: the best profile at each concurrency level the traffic meets.

Speculation that wins one stream at a time can lose when requests are batched (the seeds: MTP and
DFlash lose at 8 in flight on a 3090 Ti). `specd tune-levels` benches the candidates at each level
the recorded traffic met (its `concurrency_levels`, the most common first) or at `--levels 1,8`,
and reports, per level, the best median wall clock. llama-server has no batch-size schedule (one
`--spec-type` per server): the report says which single profile loses least over the traffic's mix
of levels, weighted by the share of requests at each level — `regret`, how much slower than each
level's own best. When the recorded traffic's typical level differs by time of day, `schedule_of`
gives each time of day the best profile at its level, and `specd tune-levels --apply` pins them
(specd.tune.pins; the daemon switches at each period's start: specd.tune.schedule).

`plan_levels` and `schedule_of` are pure (unit-tested in milliseconds); `bench_levels` runs the
bench once per level and restores the original profile on the way out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from specd.errors import UsageError
from specd.tune.bench import Progress, Settings, bench_profiles, restoring
from specd.tune.periods import PERIODS, Period
from specd.tune.targets import Target
from specd.tune.workloads import Workload

MOST_LEVELS = 3  # levels benched by default: every level multiplies the bench time


@dataclass(frozen=True)
class LevelChoice:
    level: int
    share: float  # of the requests weighed (the benched levels' requests)
    best: str
    medians_ms: Mapping[str, float]


@dataclass(frozen=True)
class LevelPlan:
    levels: tuple[LevelChoice, ...]
    single: str  # the one profile that loses least over the mix
    regret: Mapping[str, float]  # profile -> share-weighted fraction slower than each level's best

    @property
    def one_profile_wins_everywhere(self) -> bool:
        return len({choice.best for choice in self.levels}) == 1

    def sentence(self) -> str:
        if self.one_profile_wins_everywhere:
            return f"{self.single} is the fastest at every level benched: one profile serves all of it"
        per_level = ", ".join(f"{c.best} at {c.level} in flight" for c in self.levels)
        return (f"the best differs by level ({per_level}); llama-server cannot switch by batch size, so one profile "
                f"for all of it: {self.single} loses least ({100 * self.regret[self.single]:.1f}% slower than "
                f"each level's best, weighted by the traffic's share of requests at each level); where the level "
                "follows the time of day, `--apply` pins each time of day to its level's best")

    def best_near(self, level: int) -> LevelChoice:
        """The benched level nearest `level` (ties: the lower one)."""
        return min(self.levels, key=lambda c: (abs(c.level - level), c.level))

    def as_json(self) -> dict[str, Any]:
        return {"levels": [{"level": c.level, "share": round(c.share, 4), "best": c.best,
                            "median_ms": {p: round(m, 1) for p, m in c.medians_ms.items()}} for c in self.levels],
                "single": self.single, "regret": {p: round(r, 4) for p, r in self.regret.items()},
                "sentence": self.sentence()}


def parse_levels(text: str) -> dict[int, float]:
    """`--levels 1,4,8`: equal shares."""
    try:
        levels = sorted({int(word) for word in text.split(",") if word.strip()})
    except ValueError:
        raise UsageError(f"--levels {text}: expected concurrency levels as integers, e.g. 1,4,8") from None
    if not levels or levels[0] < 1:
        raise UsageError(f"--levels {text}: every level must be at least 1")
    return {level: 1.0 / len(levels) for level in levels}


def levels_of(recorded: Mapping[str, int], most: int = MOST_LEVELS) -> dict[int, float]:
    """The `most` levels with the most requests in the traffic's facts (level -> requests), and each one's
    share among them."""
    counts = sorted(((int(level), n) for level, n in recorded.items() if n > 0), key=lambda item: (-item[1], item[0]))
    kept = counts[:most]
    total = sum(n for _, n in kept)
    if total == 0:
        raise UsageError("the workload records no concurrency levels", hint="give them: --levels 1,8")
    return {level: n / total for level, n in sorted(kept)}


def plan_levels(medians_by_level: Mapping[int, Mapping[str, float]], shares: Mapping[int, float]) -> LevelPlan:
    """The best per level and the single profile with the least share-weighted regret (ties: the name)."""
    common = set.intersection(*(set(m) for m in medians_by_level.values())) if medians_by_level else set()
    if not common:
        raise UsageError("no profile was benched at every level; nothing to compare")
    weight = sum(shares[level] for level in medians_by_level)
    choices = []
    regret = dict.fromkeys(sorted(common), 0.0)
    for level in sorted(medians_by_level):
        medians = {p: medians_by_level[level][p] for p in sorted(common)}
        best = min(medians, key=lambda p: (medians[p], p))
        share = shares[level] / weight
        choices.append(LevelChoice(level, share, best, medians))
        for profile, median in medians.items():
            regret[profile] += share * (median / medians[best] - 1.0)
    single = min(regret, key=lambda p: (regret[p], p))
    return LevelPlan(tuple(choices), single, regret)


def bench_levels(target: Target, profiles: Sequence[str], workload: Workload, settings: Settings,
                 levels: Mapping[int, float], progress: Progress | None = None) -> LevelPlan:
    """Bench every profile at every level (each level its own interleaved bench); restore the original."""
    medians: dict[int, dict[str, float]] = {}
    with restoring(target):
        for level in sorted(levels):
            report = bench_profiles(target, profiles, workload.at_concurrency(level),
                                    replace(settings, concurrency=level), progress)
            common = report.common_n()
            medians[level] = {p: report.summary(p, common).median for p in report.benched()} if common else {}
    return plan_levels(medians, levels)


def schedule_of(plan: LevelPlan, levels_by_period: Mapping[str, int]) -> dict[Period, str]:
    """Each time of day the traffic was seen in -> the best profile at its typical level (the nearest
    benched level). Empty when one profile would serve every one of them: there is nothing to schedule."""
    schedule: dict[Period, str] = {period: plan.best_near(levels_by_period[period]).best
                                   for period, _, _ in PERIODS if period in levels_by_period}
    return schedule if len(set(schedule.values())) > 1 else {}
