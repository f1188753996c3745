"""`specd route --dry-run`: what the routing table would do on the recorded traffic, and the gain.

Pure, over the proxy's traffic rows (specd.traffic.records: each request's task class, the profile
that served it, its wall clock). Each recorded request is sent, on paper, to its class's route; its
expected wall clock there is what it took on the profile that served it times the table's paired
ratio between the two profiles for that class (1 when they are the same). Summed over the requests,
that gives the routed mix's wall clock and, with every ratio at either end of its 95% interval, the
range it could fall in; the same for each single profile on its own; the gain is against the best
of those, which is what one profile for everything (specd before routing) could do at best. A
request whose class has no route, or whose ratio the table lacks, counts at what it took (routing
sends it to the serving profile); the report says how many. Load is not replayed: the figure is
for the requests alone, as the table's ratios are.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from specd.routing.table import RoutingTable
from specd.traffic.taskclass import TASK_CLASSES, TaskClass


@dataclass(frozen=True)
class Recorded:
    """One recorded request, as far as the dry run needs it."""

    task_class: TaskClass | None
    profile: str | None  # the profile that served it
    wall_ms: float


@dataclass(frozen=True)
class Span:
    """A sum of expected wall clocks: at the ratios' point values, and at either end of their intervals."""

    ms: float
    lo_ms: float
    hi_ms: float

    def as_list(self) -> list[float]:
        return [round(self.ms, 1), round(self.lo_ms, 1), round(self.hi_ms, 1)]


@dataclass(frozen=True)
class DryRun:
    requests: int
    recorded_ms: float
    routed: Span
    single: dict[str, Span] = field(default_factory=dict)  # each profile for everything
    sent: dict[str, int] = field(default_factory=dict)  # requests per profile the table would send them to
    by_class: dict[str, int] = field(default_factory=dict)
    unpriced: int = 0  # requests counted at what they took (no route, or no ratio for them)

    @property
    def best_single(self) -> str | None:
        return min(self.single, key=lambda p: self.single[p].ms) if self.single else None

    def gain(self) -> tuple[float, float, float] | None:
        """The routed mix's gain over the best single profile: (point, low, high), 0.10 = 10% faster."""
        best = self.best_single
        if best is None or self.single[best].ms <= 0:
            return None
        base = self.single[best]
        return (1 - self.routed.ms / base.ms, 1 - self.routed.hi_ms / base.lo_ms, 1 - self.routed.lo_ms / base.hi_ms)

    def as_json(self) -> dict[str, Any]:
        gain = self.gain()
        return {"requests": self.requests, "recorded_ms": round(self.recorded_ms, 1),
                "routed_ms": self.routed.as_list(), "single_ms": {p: s.as_list() for p, s in self.single.items()},
                "best_single": self.best_single,
                "gain": None if gain is None else [round(g, 4) for g in gain], "sent": self.sent,
                "by_class": self.by_class, "unpriced": self.unpriced}


def _priced(table: RoutingTable, row: Recorded, profile: str) -> tuple[float, float, float] | None:
    """The row's expected wall clock on `profile` (point, low, high), from the profile that served it."""
    if row.profile is None or row.task_class is None:
        return None
    if profile == row.profile:
        return row.wall_ms, row.wall_ms, row.wall_ms
    route = table.routes.get(row.task_class)
    point = table.ratio(row.task_class, profile, row.profile)
    if route is None or point is None:
        return None
    if route.profile == row.profile and profile in route.ratios:
        found = route.ratios[profile]
        return row.wall_ms * point, row.wall_ms * found.lo, row.wall_ms * found.hi
    if route.profile == profile and row.profile in route.ratios:
        found = route.ratios[row.profile]
        return row.wall_ms * point, row.wall_ms / found.hi, row.wall_ms / max(found.lo, 1e-9)
    return row.wall_ms * point, row.wall_ms * point, row.wall_ms * point


def dry_run(rows: Sequence[Recorded], table: RoutingTable, profiles: Sequence[str]) -> DryRun:
    """The table's effect on `rows`; `profiles` are the ones to price each single-profile case for."""
    routed = [0.0, 0.0, 0.0]
    singles = {p: [0.0, 0.0, 0.0] for p in profiles}
    sent: Counter[str] = Counter()
    unpriced = 0
    for row in rows:
        target = table.profile_for(row.task_class) if row.task_class is not None else None
        found = _priced(table, row, target) if target is not None else None
        if found is None:
            found, target = (row.wall_ms, row.wall_ms, row.wall_ms), row.profile
            unpriced += 1
        sent[target or "the serving profile"] += 1
        for index in range(3):
            routed[index] += found[index]
        for profile, total in singles.items():
            own = _priced(table, row, profile) or (row.wall_ms, row.wall_ms, row.wall_ms)
            for index in range(3):
                total[index] += own[index]
    by_class: Counter[str] = Counter(row.task_class or "unknown" for row in rows)
    order: dict[str, int] = {name: i for i, name in enumerate(TASK_CLASSES)}
    return DryRun(len(rows), sum(r.wall_ms for r in rows), Span(*routed),
                  {p: Span(*t) for p, t in singles.items()}, dict(sent),
                  dict(sorted(by_class.items(), key=lambda kv: order.get(kv[0], 99))), unpriced)
