"""The routing table: which resident profile serves each task class, and the evidence for it.

The table is learned (specd.tune.routes: the night's bench replays the recorded mix on each
candidate and each class gets its own paired decision), never guessed. Each route carries the
sentence of the decision that set it and, for every other profile benched on that class, the
paired ratio of its wall clock to the route's on the same requests (0.8 = 20% faster) with its 95%
interval. The table also keeps how each profile slows down under load on each class: the paired
ratio of a request's wall clock at load level L (requests in flight on its server, itself included)
to the same request's alone. The router reads the routes for an idle server and the two together
when the routed server is busy (specd.routing.choose): a speculative server with requests in
flight can answer a request later than an idle plain one would (seed 001: DFlash 4.3x plain alone
on code, 0.7x at batch 8 on prose). A class without a route goes to the serving profile.

Stored as JSON inside the routing state (specd.routing.state), shown by `specd status`, the status
page and `specd route show`; each change goes to the history with its reasons.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specd.errors import UsageError
from specd.traffic.taskclass import TASK_CLASSES, TaskClass


@dataclass(frozen=True)
class Ratio:
    """A paired ratio of wall clocks on the same requests, its 95% interval, and the pairs behind it."""

    value: float
    lo: float
    hi: float
    n: int

    def as_list(self) -> list[float | int]:
        hi = self.hi if math.isfinite(self.hi) else 1e9  # JSON has no infinity
        return [round(self.value, 4), round(self.lo, 4), round(hi, 4), self.n]


@dataclass(frozen=True)
class Route:
    """One class's profile, the decision that put it there, and how the others compare on it."""

    profile: str
    reason: str
    changed: bool = False  # the learning that wrote this table moved it
    ratios: Mapping[str, Ratio] = field(default_factory=dict)  # other profile -> its time / this one's, alone


Slowdowns = Mapping[TaskClass, Mapping[str, Mapping[int, Ratio]]]  # class -> profile -> level -> vs alone


@dataclass(frozen=True)
class RoutingTable:
    routes: Mapping[TaskClass, Route] = field(default_factory=dict)
    slowdowns: Slowdowns = field(default_factory=dict)
    learned_at: float = 0.0
    source: str = ""  # what it was learned on: "night 2026-11-27, bench run 12, 40 recorded requests"
    margin: float = 0.05

    def profile_for(self, task_class: TaskClass) -> str | None:
        route = self.routes.get(task_class)
        return route.profile if route is not None else None

    def profiles(self) -> list[str]:
        """The profiles some class is routed to, in class order, each once."""
        seen: list[str] = []
        for task_class in TASK_CLASSES:
            name = self.profile_for(task_class)
            if name is not None and name not in seen:
                seen.append(name)
        return seen

    def ratio(self, task_class: TaskClass, profile: str, against: str) -> float | None:
        """`profile`'s wall clock over `against`'s on this class's requests, alone (1.0 when the same)."""
        if profile == against:
            return 1.0
        route = self.routes.get(task_class)
        if route is None:
            return None
        if route.profile == against:
            found = route.ratios.get(profile)
            return found.value if found is not None else None
        if route.profile == profile:
            found = route.ratios.get(against)
            return 1.0 / found.value if found is not None and found.value > 0 else None
        mine, theirs = route.ratios.get(profile), route.ratios.get(against)
        return mine.value / theirs.value if mine is not None and theirs is not None and theirs.value > 0 else None

    def slowdown(self, task_class: TaskClass, profile: str, level: int) -> float | None:
        """How much longer a `task_class` request takes on `profile` with `level` requests in flight on its
        server (itself included) than alone: 1.0 at level 1, the measured ratios between, and beyond the
        highest measured level along the slope of the last two (never downwards). None without measurements."""
        if level <= 1:
            return 1.0
        cells = self.slowdowns.get(task_class, {}).get(profile, {})
        if not cells:
            return None
        points = [(1, 1.0), *sorted((lvl, cell.value) for lvl, cell in cells.items() if lvl > 1)]
        for (x0, y0), (x1, y1) in itertools.pairwise(points):
            if level <= x1:
                return y0 + (y1 - y0) * (level - x0) / (x1 - x0)
        (x0, y0), (x1, y1) = points[-2], points[-1]
        return y1 + max(0.0, (y1 - y0) / (x1 - x0)) * (level - x1)

    def as_json(self) -> dict[str, Any]:
        return {
            "routes": {c: {"profile": r.profile, "reason": r.reason, "changed": r.changed,
                           "ratios": {p: ratio.as_list() for p, ratio in r.ratios.items()}}
                       for c, r in self.routes.items()},
            "slowdowns": {c: {p: {str(level): cell.as_list() for level, cell in sorted(levels.items())}
                              for p, levels in by_profile.items()} for c, by_profile in self.slowdowns.items()},
            "learned_at": self.learned_at, "source": self.source, "margin": self.margin,
        }


def _task_class(value: Any, where: str) -> TaskClass:
    for known in TASK_CLASSES:
        if value == known:
            return known
    raise UsageError(f"{where}: unknown task class {value!r} (known: {', '.join(TASK_CLASSES)})")


def _ratio(raw: Any, where: str) -> Ratio:
    if not isinstance(raw, list) or len(raw) != 4 or not all(isinstance(x, int | float) for x in raw):
        raise UsageError(f"{where}: a ratio is [value, lo, hi, n], not {raw!r}")
    value, lo, hi, n = raw
    if n < 1 or not all(math.isfinite(float(x)) and x >= 0 for x in (value, lo, hi)):
        raise UsageError(f"{where}: a ratio needs n >= 1 and finite values, not {raw!r}")
    return Ratio(float(value), float(lo), float(hi), int(n))


def _routes(raw_routes: Any, where: str) -> dict[TaskClass, Route]:
    if not isinstance(raw_routes, Mapping):
        raise UsageError(f"{where}: 'routes' must be an object")
    routes: dict[TaskClass, Route] = {}
    for name, raw in raw_routes.items():
        task_class = _task_class(name, f"{where}: routes")
        if isinstance(raw, str):  # the short form a person writes: {"code": "mtp"}
            raw = {"profile": raw, "reason": "configured"}
        if not isinstance(raw, Mapping) or not isinstance(raw.get("profile"), str) or not raw["profile"]:
            raise UsageError(f"{where}: routes.{name} needs a profile name")
        ratios = raw.get("ratios", {})
        if not isinstance(ratios, Mapping):
            raise UsageError(f"{where}: routes.{name}.ratios must be an object of profiles")
        routes[task_class] = Route(str(raw["profile"]), str(raw.get("reason", "")), bool(raw.get("changed", False)),
                                   {str(p): _ratio(r, f"{where}: routes.{name}.ratios.{p}") for p, r in ratios.items()})
    return routes


def _slowdowns(raw: Any, where: str) -> dict[TaskClass, dict[str, dict[int, Ratio]]]:
    if not isinstance(raw, Mapping):
        raise UsageError(f"{where}: 'slowdowns' must be an object")
    found: dict[TaskClass, dict[str, dict[int, Ratio]]] = {}
    for name, by_profile in raw.items():
        task_class = _task_class(name, f"{where}: slowdowns")
        if not isinstance(by_profile, Mapping):
            raise UsageError(f"{where}: slowdowns.{name} must be an object of profiles")
        for profile, levels in by_profile.items():
            if not isinstance(levels, Mapping):
                raise UsageError(f"{where}: slowdowns.{name}.{profile} must be an object of load levels")
            for level, cell in levels.items():
                if not str(level).isdigit() or int(level) < 2:
                    raise UsageError(f"{where}: slowdowns.{name}.{profile}: load level {level!r} is not a count >= 2")
                found.setdefault(task_class, {}).setdefault(str(profile), {})[int(level)] = _ratio(
                    cell, f"{where}: slowdowns.{name}.{profile}.{level}")
    return found


def table_from_json(data: Mapping[str, Any], where: str = "routing table") -> RoutingTable:
    """The table back from `as_json`; a malformed one is refused, naming the key."""
    margin = data.get("margin", 0.05)
    if not isinstance(margin, int | float) or not 0 <= margin < 1:
        raise UsageError(f"{where}: 'margin' must be a number in [0, 1), not {margin!r}")
    return RoutingTable(_routes(data.get("routes", {}), where), _slowdowns(data.get("slowdowns", {}), where),
                        float(data.get("learned_at", 0.0) or 0.0), str(data.get("source", "")), float(margin))


def describe(table: RoutingTable) -> list[str]:
    """One line per class: its profile, and why (for status, `route show`, the history)."""
    if not table.routes:
        return ["no routing table yet: the night's bench writes one (or `specd route learn`)"]
    lines = []
    for task_class in TASK_CLASSES:
        route = table.routes.get(task_class)
        if route is None:
            lines.append(f"{task_class:9} -> the serving profile (no evidence for this class)")
            continue
        mark = " (changed)" if route.changed else ""
        lines.append(f"{task_class:9} -> {route.profile}{mark}: {route.reason}")
    return lines
