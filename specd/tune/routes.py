"""Learning the routing table from a bench: each task class gets the tuner's decision on its own.

The night's bench replays the recorded mix on each candidate (specd.tune.bench), so every result
carries its request's task class and the load it ran at. For each class, the candidates' wall
clocks on that class's requests (the ones every candidate ran) go through the tuner's own decision
(specd.tune.tuner.decide: the margin, separated 95% intervals, never on a pin) with the class's
current route as the incumbent: a class's route moves only on clear evidence, the way the serving
profile does, and a class with too few requests keeps its route. Each (class, profile, load
level) cell is kept with its median and interval, so the router can tell when a busy speculative
server answers later than an idle plain one. What was decided, and why, is each route's reason.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from specd.routing.table import Cell, Route, RoutingTable
from specd.traffic.taskclass import TASK_CLASSES, TaskClass
from specd.tune.bench import Result
from specd.tune.stats import summarize
from specd.tune.tuner import Decision, decide

MIN_PER_CLASS = 3  # requests of a class every candidate ran, before its route may move


@dataclass(frozen=True)
class Learned:
    table: RoutingTable
    decisions: Mapping[TaskClass, Decision]
    changed: tuple[TaskClass, ...]
    skipped: Mapping[TaskClass, str]  # classes left as they were, and why

    def sentence(self) -> str:
        moved = ", ".join(f"{c} -> {self.table.profile_for(c)}" for c in self.changed)
        kept = "; ".join(f"{c}: {why}" for c, why in self.skipped.items())
        head = f"routes changed: {moved}" if moved else "routes kept"
        return head + (f" ({kept})" if kept else "")


def _costs(rows: Mapping[str, Sequence[Result]]) -> dict[TaskClass, dict[str, dict[int, Cell]]]:
    by_cell: dict[tuple[TaskClass, str, int], list[float]] = defaultdict(list)
    for profile, results in rows.items():
        for result in results:
            by_cell[result.task_class, profile, max(1, result.concurrency)].append(result.wall_ms)
    costs: dict[TaskClass, dict[str, dict[int, Cell]]] = {}
    for (task_class, profile, level), walls in sorted(by_cell.items()):
        summary = summarize(walls)
        costs.setdefault(task_class, {}).setdefault(profile, {})[level] = Cell(
            summary.n, summary.median, summary.ci_lo, summary.ci_hi)
    return costs


def learn(rows: Mapping[str, Sequence[Result]], previous: RoutingTable, *, active: str | None, margin: float,
          source: str, now: float, pinned: str | None = None, min_n: int = MIN_PER_CLASS) -> Learned:
    """The table after this bench: each class's route decided on that class's requests alone."""
    routes: dict[TaskClass, Route] = {}
    decisions: dict[TaskClass, Decision] = {}
    skipped: dict[TaskClass, str] = {}
    changed: list[TaskClass] = []
    for task_class in TASK_CLASSES:
        walls = {p: [r.wall_ms for r in results if r.task_class == task_class] for p, results in rows.items()}
        walls = {p: w for p, w in walls.items() if w}
        old = previous.routes.get(task_class)
        if not walls:
            if old is not None:
                routes[task_class] = Route(old.profile, old.reason)
            continue
        shared = min(len(w) for w in walls.values())
        if shared < min_n or len(walls) < 2:
            why = (f"{shared} request(s) of this class in the bench, fewer than {min_n}" if shared < min_n
                   else "only one profile was benched on it")
            skipped[task_class] = why
            if old is not None:
                routes[task_class] = Route(old.profile, f"{old.reason} (kept: {why})")
            continue
        summaries = {p: summarize(w[:shared]) for p, w in walls.items()}
        incumbent = old.profile if old is not None and old.profile in summaries else active
        decision = decide(summaries, incumbent if incumbent in summaries else None, margin=margin, pinned=pinned)
        decisions[task_class] = decision
        chosen = decision.best if decision.switch and decision.best is not None else (incumbent or decision.best)
        if chosen is None:
            continue
        moved = old is None or chosen != old.profile
        routes[task_class] = Route(chosen, f"{decision.reason} ({shared} {task_class} requests)", moved)
        if moved:
            changed.append(task_class)
    table = RoutingTable(routes, _costs(rows), now, source, margin)
    return Learned(table, decisions, tuple(changed), skipped)
