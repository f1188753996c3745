"""The 'recent' workload: this box's own traffic, as the daemon recorded it, to bench on.

Two sources, one result (a `Workload`, specd.tune.workloads): with `[proxy] capture_bodies` the
captured bodies themselves, each line already a workload line that says when it arrived and how
many requests were in flight then; without, requests synthesized from the traffic table's rows
(task class, prompt and output lengths, sampling settings, conversation turns, in-flight count),
resampled a whole conversation at a time so the mix, the lengths, the turns and the concurrency
each request met stay together. Either way a request keeps the concurrency it met and the order
it came in, so a replay meets the box's traffic, not a one-at-a-time version of it; and
`period` keeps one time of day when traffic differs by hour.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from specd import paths
from specd.errors import UsageError
from specd.profiles.config import Deployment
from specd.traffic import records as traffic
from specd.traffic.capture import CAPTURE_NAME
from specd.traffic.shape import conversation_of
from specd.traffic.taskclass import TASK_CLASSES, TaskClass
from specd.tune.periods import Period, period_of
from specd.tune.workloads import (
    Workload,
    WorkloadRequest,
    levels_by_period,
    load_workload,
    opening,
    parse_line,
    question,
    typical_level,
)

log = logging.getLogger(__name__)
RECENT_DAYS = 7.0
DEFAULT_MAX_TOKENS = 256  # a captured body that sets no limit (the bench needs one)
MIN_REQUESTS = 16
KEPT_CAPTURES = 32  # the most recent captured bodies replayed, at least


def capture_dir(deployment: Deployment) -> Path:
    return paths.state_dir() / "capture" / deployment.name


def captured_bodies(deployment: Deployment) -> list[dict[str, Any]]:
    """Captured bodies, oldest first (each with its `specd` metadata)."""
    bodies: list[dict[str, Any]] = []
    for path in (capture_dir(deployment) / f"{CAPTURE_NAME}.1", capture_dir(deployment) / CAPTURE_NAME):
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    body = json.loads(line)
                except ValueError:
                    continue
                if isinstance(body, dict):
                    bodies.append(body)
    return bodies


def recorded_rows(deployment: Deployment, days: float, period: Period | None = None) -> list[traffic.TrafficRecord]:
    """Successful proxied requests of the last `days` (in `period` only, when given), oldest first."""
    conn = traffic.open_db()
    try:
        rows = traffic.fetch_records(conn, time.time() - days * 86400, deployment.unit)
    finally:
        conn.close()
    return [r for r in rows if 200 <= r.status < 300 and (period is None or period_of(r.ts) == period)]


def _conversations(requests: Sequence[WorkloadRequest]) -> tuple[WorkloadRequest, ...]:
    """Name the conversations of captured bodies: a later turn joins the newest opening it continues;
    an opening nothing continues stays a lone request (a repeated prompt is not a conversation)."""
    keyed = [conversation_of(list(r.body["messages"])) for r in requests]
    newest: dict[str, int] = {}
    opened_by: list[int | None] = []
    for index, (key, turn) in enumerate(keyed):
        if key is None:
            opened_by.append(None)
        elif turn == 1 or key not in newest:
            newest[key] = index
            opened_by.append(index)
        else:
            opened_by.append(newest[key])
    continued = {o for i, o in enumerate(opened_by) if o is not None and o != i}
    return tuple(replace(r, conversation=f"captured-{opened_by[i]}") if opened_by[i] in continued else r
                 for i, r in enumerate(requests))


def captured_workload(deployment: Deployment, n: int, rows: Sequence[traffic.TrafficRecord],
                      period: Period | None = None) -> Workload | None:
    """The captured bodies as a workload, or None when none can be replayed.

    A body captured before specd recorded levels with it is replayed at the typical level of `rows`.
    """
    where = capture_dir(deployment) / CAPTURE_NAME
    fallback = typical_level([r.in_flight + 1 for r in rows])
    requests: list[WorkloadRequest] = []
    for number, body in enumerate(captured_bodies(deployment), start=1):
        meta = body.get("specd")
        has_level = isinstance(meta, dict) and "concurrency" in meta
        body.setdefault("max_tokens", body.pop("max_completion_tokens", DEFAULT_MAX_TOKENS))
        try:
            request = parse_line(json.dumps(body), where, number)
        except UsageError as exc:
            log.info("recent workload: skipping a captured body: %s", exc.message)
            continue
        if period is not None and (request.recorded_at is None or period_of(request.recorded_at) != period):
            continue
        requests.append(request if has_level else replace(request, concurrency=fallback))
    if not requests:
        return None
    kept = _conversations(requests[-max(n, KEPT_CAPTURES):])
    return Workload(name="recent", requests=kept, source=where, origin="captured")


def _instances(rows: Sequence[traffic.TrafficRecord]) -> list[list[traffic.TrafficRecord]]:
    """Rows grouped into conversations in arrival order: a later turn joins the newest opening with its key."""
    groups: list[list[traffic.TrafficRecord]] = []
    newest: dict[str, list[traffic.TrafficRecord]] = {}
    for row in rows:
        if row.conversation is not None and row.turn > 1 and row.conversation in newest:
            newest[row.conversation].append(row)
            continue
        groups.append([row])
        if row.conversation is not None:
            newest[row.conversation] = groups[-1]
    return groups


def _task_class(row: traffic.TrafficRecord) -> TaskClass:
    return next((c for c in TASK_CLASSES if c == row.task_class), "factual")


def _sampling(row: traffic.TrafficRecord) -> dict[str, Any]:
    try:
        settings = json.loads(row.sampling) if row.sampling else {}
    except ValueError:
        return {}
    return settings if isinstance(settings, dict) else {}


def synthetic_workload(rows: Sequence[traffic.TrafficRecord], n: int, seed: int = 0) -> Workload:
    """Requests shaped like `rows`: whole recorded conversations resampled until there are at least
    `n`, each turn with its row's class, lengths, sampling and level, in the order they came in."""
    usable = [r for r in rows if r.task_class and traffic.prompt_length(r) and traffic.output_length(r)]
    groups = _instances(usable)
    if not groups:
        raise UsageError("no recorded requests with a task class and lengths to shape a workload on")
    rng = np.random.default_rng(seed)
    chosen: list[int] = []
    while sum(len(groups[g]) for g in chosen) < n:
        chosen.append(int(rng.integers(len(groups))))
    requests: list[WorkloadRequest] = []
    for number, g in enumerate(sorted(chosen, key=lambda g: (groups[g][0].ts, g))):
        group = groups[g]
        first = group[0]
        messages = opening(_task_class(first), int(traffic.prompt_length(first) or 1), seed * 100_003 + number,
                           number)
        name = f"recent-{number}" if len(group) > 1 else None
        for turn, row in enumerate(group):
            if turn:
                messages += [{"role": "assistant", "content": f"(answer {number}.{turn})"},
                             {"role": "user", "content": question(_task_class(row), number + turn)}]
            body = {"messages": [dict(m) for m in messages], "max_tokens": int(traffic.output_length(row) or 1),
                    **_sampling(row)}
            requests.append(WorkloadRequest(body=body, task_class=_task_class(row), concurrency=row.in_flight + 1,
                                            conversation=name, recorded_at=row.ts))
    return Workload(name="recent", requests=tuple(requests), origin="synthetic")


def recent_workload(deployment: Deployment, n: int, *, days: float = RECENT_DAYS,
                    period: Period | None = None) -> Workload:
    """Captured bodies replayed when capture is on; else requests synthesized from the recorded shape."""
    rows = recorded_rows(deployment, days, period)
    captured = captured_workload(deployment, n, rows, period)
    if captured is not None:
        return captured
    when = f" in the {period}" if period is not None else ""
    if not any(r.task_class and traffic.prompt_length(r) and traffic.output_length(r) for r in rows):
        raise UsageError(f"no recorded traffic for {deployment.unit}{when} in the last {days:g} days to build "
                         "the 'recent' workload",
                         hint="run the daemon with its proxy, or pass --workload NAME|FILE (e.g. code, prose)")
    return synthetic_workload(rows, max(n, MIN_REQUESTS))


def recorded_levels_by_period(deployment: Deployment, days: float = RECENT_DAYS) -> dict[str, int]:
    """The typical concurrency per time of day over all the recorded requests (not a sample of them)."""
    return levels_by_period([(r.ts, r.in_flight + 1) for r in recorded_rows(deployment, days)])


def resolve_workload(spec: str, deployment: Deployment, n: int, period: Period | None = None) -> Workload:
    """`recent` (this box's traffic), a built-in name or a JSONL file."""
    if spec == "recent":
        return recent_workload(deployment, n, period=period)
    if period is not None:
        raise UsageError("--period picks a time of day of recorded traffic: it needs --workload recent")
    return load_workload(spec)
