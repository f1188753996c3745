"""Learning the routing table from a bench: each task class gets its own paired decision.

The night's bench replays the recorded mix on each candidate (specd.tune.bench), so every result
carries its request's task class, its place in the plan and its round, and the load it ran at, and
every candidate ran the same requests. A class's requests differ in size far more than profiles
differ in speed (64 or 1024 output tokens), so a candidate is judged by the tuner's paired rule
(specd.tune.paired): the ratio of its wall clock to the incumbent's on the *same* request, averaged
on the log scale and weighed by the request's size. Unlike the serving profile's decision, a route
serves prompts of its class not seen yet, so the interval is a t interval over the class's DISTINCT
requests (each its replays' mean), not over rounds: replaying one prompt measures that prompt again.
A class's route moves only on the verdict "faster" (the whole interval below 1 - margin: clear
evidence, the rule the serving profile moves by), never on a pin, and a class with fewer than
MIN_PER_CLASS distinct requests keeps its route. The decision reads every pair, at the load each
request was replayed at (the recorded mix's). Each route keeps every other profile's ratio to it on
the requests that ran alone, and each profile's slowdown under load (the same request at load level L
against alone, paired by request), so the router can tell when a busy speculative server answers
later than an idle plain one.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from specd.deploy.seams import Seams
from specd.errors import SpecdError
from specd.profiles.config import Deployment
from specd.routing.residents import Routing
from specd.routing.table import Ratio, Route, RoutingTable
from specd.traffic.taskclass import TASK_CLASSES, TaskClass
from specd.tune.bench import Result
from specd.tune.paired import Comparison, compare, interval, pairs_of

# Distinct requests of a class every candidate ran, before its route may move: replays of one request
# measure that request again (its timing noise), not the class; on the real tiny model a route learned
# from one copy-edit prompt replayed 8 times sent that class the wrong way on unseen prompts
# (benchmarks/results/routing-real-text.md).
MIN_PER_CLASS = 3
LEVEL = 0.95  # one look at the evidence: the table is learned once per bench


def _ratio(found: Comparison) -> Ratio:
    return Ratio(found.interval.ratio, found.interval.lo, found.interval.hi, found.interval.pairs)


def paired(candidate: Sequence[Result], incumbent: Sequence[Result], margin: float = 0.05) -> Comparison | None:
    """The candidate against the incumbent on the requests both ran (None: none shared)."""
    pairs = pairs_of(candidate, incumbent)
    if not pairs:
        return None
    return compare(candidate[0].profile, incumbent[0].profile, pairs, LEVEL, margin, unseen=True)


def slowdowns(results: Sequence[Result]) -> dict[int, Ratio]:
    """Per load level >= 2, a request's wall clock there over the same request's alone (level 1)."""
    alone: defaultdict[int, list[float]] = defaultdict(list)
    for result in results:
        if result.concurrency <= 1 and result.wall_ms > 0:
            alone[result.request_index].append(result.wall_ms)
    by_level: defaultdict[int, list[tuple[float, float, int]]] = defaultdict(list)
    for result in results:
        reference = alone.get(result.request_index)
        if result.concurrency >= 2 and reference and result.wall_ms > 0:
            base = sorted(reference)[len(reference) // 2]
            by_level[result.concurrency].append(
                (math.log(result.wall_ms / base), math.sqrt(result.wall_ms * base), result.round))
    found = {}
    for level, rows in sorted(by_level.items()):
        spread = interval([x for x, _, _ in rows], [r for _, _, r in rows], LEVEL, [w for _, w, _ in rows])
        found[level] = Ratio(spread.ratio, spread.lo, spread.hi, spread.pairs)
    return found


def _pct(ratio: float) -> str:
    return f"{100 * (1 - ratio):.0f}% faster" if ratio < 1 else f"{100 * (ratio - 1):.0f}% slower"


def _evidence(found: Comparison) -> str:
    r = found.interval
    hi = "unbounded" if not math.isfinite(r.hi) else f"{r.hi:.2f}"
    per = "; per output token, as lengths differed" if found.measure == "per-token" else ""
    return f"ratio {r.ratio:.2f}, 95% interval {r.lo:.2f}-{hi}, {r.pairs} paired requests of {r.rounds} distinct{per}"


@dataclass(frozen=True)
class Learned:
    table: RoutingTable
    changed: tuple[TaskClass, ...]
    skipped: Mapping[TaskClass, str]  # classes left as they were, and why

    def sentence(self) -> str:
        moved = ", ".join(f"{c} -> {self.table.profile_for(c)}" for c in self.changed)
        kept = "; ".join(f"{c}: {why}" for c, why in self.skipped.items())
        head = f"routes changed: {moved}" if moved else "routes kept"
        return head + (f" ({kept})" if kept else "")


def _decide(task_class: TaskClass, rows: Mapping[str, Sequence[Result]], old: Route | None, active: str | None,
            margin: float, pinned: str | None) -> tuple[str, str]:
    """(the class's profile, why) from paired comparisons against the incumbent."""
    incumbent = old.profile if old is not None and old.profile in rows else active if active in rows else None
    if incumbent is None:  # no route before and the serving profile not benched: the fastest against any one
        reference = min(rows)
        against = {p: paired(rows[p], rows[reference], margin) for p in rows}
        best = min(rows, key=lambda p: c.interval.ratio if (c := against[p]) is not None else math.inf)
        return best, f"fastest on this class with no route before ({len(rows[best])} requests)"
    found = {p: c for p in rows if p != incumbent and (c := paired(rows[p], rows[incumbent], margin)) is not None}
    faster = sorted((p for p, c in found.items() if c.verdict == "faster"), key=lambda p: found[p].interval.ratio)
    nearest = min(found, key=lambda p: found[p].interval.ratio) if found else None
    if faster and pinned is None:
        top = faster[0]
        return top, f"{top} {_pct(found[top].interval.ratio)} than {incumbent} ({_evidence(found[top])})"
    if nearest is None:
        return incumbent, f"kept {incumbent}: no other profile ran these requests"
    if faster:
        return incumbent, f"kept {incumbent}: pinned to {pinned} ({faster[0]} {_pct(found[faster[0]].interval.ratio)})"
    return incumbent, (f"kept {incumbent}: no profile is {margin:.0%} faster with its interval clear "
                       f"(nearest: {nearest} {_pct(found[nearest].interval.ratio)}, {found[nearest].verdict}, "
                       f"{_evidence(found[nearest])})")


def learn(rows: Mapping[str, Sequence[Result]], previous: RoutingTable, *, active: str | None, margin: float,
          source: str, now: float, pinned: str | None = None, min_n: int = MIN_PER_CLASS) -> Learned:
    """The table after this bench: each class's route decided on that class's requests alone."""
    routes: dict[TaskClass, Route] = {}
    skipped: dict[TaskClass, str] = {}
    changed: list[TaskClass] = []
    table_slowdowns: dict[TaskClass, dict[str, dict[int, Ratio]]] = {}
    for task_class in TASK_CLASSES:
        mine = {p: [r for r in results if r.task_class == task_class] for p, results in rows.items()}
        mine = {p: r for p, r in mine.items() if r}
        old = previous.routes.get(task_class)
        for profile, results in mine.items():
            if found := slowdowns(results):
                table_slowdowns.setdefault(task_class, {})[profile] = found
        shared = min((len({r.request_index for r in results}) for results in mine.values()), default=0)
        if shared < min_n or len(mine) < 2:
            if mine:
                skipped[task_class] = (f"{shared} distinct request(s) of this class in the bench (a replay of "
                                       f"one request counts once), fewer than {min_n}"
                                       if shared < min_n else "only one profile was benched on it")
            if old is not None:
                routes[task_class] = Route(old.profile, old.reason, False, old.ratios)
            continue
        chosen, why = _decide(task_class, mine, old, active, margin, pinned)
        alone = {p: [r for r in results if r.concurrency <= 1] for p, results in mine.items()}
        basis = alone if min(len(r) for r in alone.values()) >= min_n else mine  # the load rule's ratios: alone
        ratios = {p: _ratio(c) for p in basis if p != chosen and (c := paired(basis[p], basis[chosen], margin))}
        moved = old is None or chosen != old.profile
        routes[task_class] = Route(chosen, why, moved, ratios)
        if moved:
            changed.append(task_class)
    return Learned(RoutingTable(routes, table_slowdowns, now, source, margin), tuple(changed), skipped)


def learn_after_bench(deployment: Deployment, results: Mapping[str, Sequence[Result]], seams: Seams, *,
                      margin: float, active: str | None, pinned: str | None, source: str) -> Learned | None:
    """The night's step after its bench: learn the table from the bench's results and keep it (history
    says what moved and why); with routing on, the companions follow the new table. None when the
    bench had fewer than two profiles (nothing to compare per class), or the deployment never asked
    for routing (no `[routing]` in specd.toml, never turned on, no table learned before)."""
    if sum(1 for rows in results.values() if rows) < 2:
        return None
    routing = Routing(seams)
    previous = routing.state()
    if not (deployment.routing.configured or previous.on or previous.table.routes):
        return None  # a deployment that never asked for routing gets no table (and no history rows about one)
    learned = learn(results, previous.table, active=active, margin=margin, source=source, now=time.time(),
                    pinned=pinned)
    routing.set_table(learned.table, learned.sentence())
    if previous.on:  # the companions (or the per-request stamps) follow the table and the serving profile
        try:
            routing.on(table=learned.table)
        except SpecdError as exc:
            seams.history.event(deployment.unit, "route-failed",
                                f"the companions could not follow the new table: {str(exc).splitlines()[0]}")
    return learned
