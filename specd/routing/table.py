"""The routing table: which resident profile serves each task class, and the evidence for it.

The table is learned (specd.tune.routes: the night's bench replays the recorded mix on each
candidate and each class gets the tuner's decision), never guessed: every route carries the
sentence of the decision that set it, and the table keeps each (class, profile, load level) cell
the bench measured — median wall clock, its 95% interval, the requests behind it. The router reads
the routes for an idle box and the cells to judge load (specd.routing.choose): a speculative server
with two requests in flight may answer a code request later than an idle plain one, and the cells
measured at levels 1 and 4 say by how much. A class without a route goes to the serving profile.

Stored as JSON inside the routing state (specd.routing.state), shown by `specd status`, the status
page and `specd route show`, and each change goes to the history with its reasons.
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
class Cell:
    """What the bench measured for one (class, profile, load level): wall clock per request."""

    n: int
    median_ms: float
    lo_ms: float  # 95% interval of the median
    hi_ms: float

    def as_list(self) -> list[float | int]:
        return [self.n, round(self.median_ms, 1), round(self.lo_ms, 1), round(self.hi_ms, 1)]


@dataclass(frozen=True)
class Route:
    """One class's profile and the decision that put it there."""

    profile: str
    reason: str
    changed: bool = False  # the learning that wrote this table moved it


Costs = Mapping[TaskClass, Mapping[str, Mapping[int, Cell]]]  # class -> profile -> load level -> cell


@dataclass(frozen=True)
class RoutingTable:
    routes: Mapping[TaskClass, Route] = field(default_factory=dict)
    costs: Costs = field(default_factory=dict)
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

    def levels(self, task_class: TaskClass, profile: str) -> dict[int, Cell]:
        return dict(self.costs.get(task_class, {}).get(profile, {}))

    def cost(self, task_class: TaskClass, profile: str, level: int) -> float | None:
        """Expected wall clock of a `task_class` request on `profile` with `level` requests in flight on
        its server (itself included): the measured median, linear between measured levels, and beyond
        the highest along the slope of the last two (never downwards). None where it cannot be said: no
        cell, or a level above the only one measured (one level says nothing about batching)."""
        cells = self.levels(task_class, profile)
        if not cells:
            return None
        points = sorted((lvl, cell.median_ms) for lvl, cell in cells.items())
        if level <= points[0][0]:
            return points[0][1]
        for (x0, y0), (x1, y1) in itertools.pairwise(points):
            if level <= x1:
                return y0 + (y1 - y0) * (level - x0) / (x1 - x0)
        if len(points) == 1:
            return None
        (x0, y0), (x1, y1) = points[-2], points[-1]
        return y1 + max(0.0, (y1 - y0) / (x1 - x0)) * (level - x1)

    def as_json(self) -> dict[str, Any]:
        return {
            "routes": {c: {"profile": r.profile, "reason": r.reason, "changed": r.changed}
                       for c, r in self.routes.items()},
            "costs": {c: {p: {str(level): cell.as_list() for level, cell in sorted(levels.items())}
                          for p, levels in by_profile.items()} for c, by_profile in self.costs.items()},
            "learned_at": self.learned_at, "source": self.source, "margin": self.margin,
        }


def _task_class(value: Any, where: str) -> TaskClass:
    for known in TASK_CLASSES:
        if value == known:
            return known
    raise UsageError(f"{where}: unknown task class {value!r} (known: {', '.join(TASK_CLASSES)})")


def _cell(raw: Any, where: str) -> Cell:
    if not isinstance(raw, list) or len(raw) != 4 or not all(isinstance(x, int | float) for x in raw):
        raise UsageError(f"{where}: a cell is [n, median_ms, lo_ms, hi_ms], not {raw!r}")
    n, median, lo, hi = raw
    if n < 1 or not all(math.isfinite(float(x)) and x >= 0 for x in (median, lo, hi)):
        raise UsageError(f"{where}: a cell needs n >= 1 and finite times, not {raw!r}")
    return Cell(int(n), float(median), float(lo), float(hi))


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
        routes[task_class] = Route(str(raw["profile"]), str(raw.get("reason", "")), bool(raw.get("changed", False)))
    return routes


def _costs(raw_costs: Any, where: str) -> dict[TaskClass, dict[str, dict[int, Cell]]]:
    if not isinstance(raw_costs, Mapping):
        raise UsageError(f"{where}: 'costs' must be an object")
    costs: dict[TaskClass, dict[str, dict[int, Cell]]] = {}
    for name, by_profile in raw_costs.items():
        task_class = _task_class(name, f"{where}: costs")
        if not isinstance(by_profile, Mapping):
            raise UsageError(f"{where}: costs.{name} must be an object of profiles")
        for profile, levels in by_profile.items():
            if not isinstance(levels, Mapping):
                raise UsageError(f"{where}: costs.{name}.{profile} must be an object of load levels")
            for level, cell in levels.items():
                if not str(level).isdigit() or int(level) < 1:
                    raise UsageError(f"{where}: costs.{name}.{profile}: load level {level!r} is not a count >= 1")
                costs.setdefault(task_class, {}).setdefault(str(profile), {})[int(level)] = _cell(
                    cell, f"{where}: costs.{name}.{profile}.{level}")
    return costs


def table_from_json(data: Mapping[str, Any], where: str = "routing table") -> RoutingTable:
    """The table back from `as_json`; a malformed one is refused, naming the key."""
    margin = data.get("margin", 0.05)
    if not isinstance(margin, int | float) or not 0 <= margin < 1:
        raise UsageError(f"{where}: 'margin' must be a number in [0, 1), not {margin!r}")
    return RoutingTable(_routes(data.get("routes", {}), where), _costs(data.get("costs", {}), where),
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
