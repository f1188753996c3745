"""The nightly run, as the daemon's scheduler fires it, and what it leaves in history.

Its order: skip when the deployment is pinned; wait for an idle window (no client request for
`[tuner] idle_minutes`) as long as the budget (`budget_minutes`, counted from the firing) allows;
bench the candidates on this box's recent traffic (specd.tune.recent) with no round starting past
the budget; verify the winner; switch or not (specd.tune.tuner). Every way it ends is one history
event the owner reads the next morning (`specd history --events`, `specd status`):

    tune          the decision, its numbers, the traffic it was measured on, the wait and the budget
    tune-skip     pinned, or no idle window within the budget
    tune-stopped  clients sent requests mid-run: it stopped, put the live profile back, switched nothing
    tune-failed   anything else, with the error

Clients are seen on the proxy's counts (`clients`: requests accepted so far, requests in flight),
which the bench's own requests never touch (they go to the server directly): the idle wait counts
a request from when the proxy accepts it, not from when its traffic row is written; and mid-run,
polled every POLL_S, the first client request stops the run: no new bench request or switch
starts, the requests already sent finish, and the live profile is switched back through the
proxy's drain, so clients see latency, never errors. Without a proxy the bench's own requests
cannot be told from clients', so only the idle check (on the sampled counters) runs.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

from specd import paths
from specd.clock import SYSTEM_CLOCK, Clock
from specd.deploy.history import History
from specd.deploy.seams import SeamsFactory
from specd.deploy.switch import Switcher
from specd.errors import Interrupted, ProfileError, SpecdError
from specd.profiles.axes import parse_axis
from specd.profiles.config import Config, Deployment
from specd.profiles.load import load_profile
from specd.traffic import records as traffic
from specd.tune.bench import Report
from specd.tune.pins import pin_in_force
from specd.tune.recent import resolve_workload
from specd.tune.routes import learn_after_bench
from specd.tune.sweep import sweep_deployment
from specd.tune.tuner import Decision, tune_deployment

log = logging.getLogger(__name__)
POLL_S = 0.05  # how often the run looks at the proxy for client requests
IDLE_POLL_S = 5.0  # how often the idle wait looks again

ClientActivity = Callable[[], tuple[int, int]]  # the proxy's client requests: (accepted so far, in flight now)
SETTLE_S = 1.0  # an idle verdict is confirmed this much later: a request just answered has its row written by then


class TrafficWatch:
    """Polls the proxy on a thread while the run benches; `arrived` is set at the first client request."""

    def __init__(self, clients: ClientActivity, clock: Clock, poll_s: float = POLL_S) -> None:
        self.clients, self.clock, self.poll_s = clients, clock, poll_s
        self.baseline = clients()[0]
        self.arrived = threading.Event()
        self.seen_at: float | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="specd-night-watch", daemon=True)

    def _run(self) -> None:
        while not self._done.wait(self.poll_s):
            accepted, in_flight = self.clients()
            if accepted > self.baseline or in_flight > 0:
                self.seen_at = self.clock.monotonic()
                self.arrived.set()
                return

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._done.set()
        self._thread.join()


def last_traffic_age_s(deployment: Deployment, window_s: float, now: float) -> float | None:
    """Seconds since the last recorded request ended (proxy rows, else sampled counters); None: none in the window."""
    conn = traffic.open_db()
    try:
        records = traffic.fetch_records(conn, now - window_s - 86400, deployment.unit)
        ends = [r.ts + r.total_ms / 1000.0 for r in records]
        if ends and max(ends) >= now - window_s:
            return max(0.0, now - max(ends))
        totals = traffic.counter_totals(conn, now - window_s, deployment.unit)
    finally:
        conn.close()
    busy = any(t.get("predicted_tokens", 0.0) > 0 or t.get("prompt_tokens", 0.0) > 0
               for t in totals.by_profile.values())
    return 0.0 if busy else None


@dataclass
class IdleWait:
    idle: bool
    waited_s: float
    last_age_s: float | None = None  # when it gave up: how long ago the last request ended


def wait_for_idle(deployment: Deployment, idle_s: float, deadline: float, clients: ClientActivity | None,
                  clock: Clock) -> IdleWait:
    """Wait until no client request for `idle_s`, giving up once that cannot happen before `deadline`."""
    started = clock.monotonic()
    busy_at: float | None = None  # when the proxy last showed a client (its row may not be written yet)
    last_accepted: int | None = None
    confirmed = clients is None
    while True:
        if clients is not None:
            accepted, in_flight = clients()
            if in_flight > 0 or (last_accepted is not None and accepted != last_accepted):
                busy_at = clock.monotonic()
            last_accepted = accepted
        recorded = last_traffic_age_s(deployment, idle_s, clock.time())
        seen = None if busy_at is None else clock.monotonic() - busy_at
        age = min((a for a in (recorded, seen) if a is not None), default=None)
        if age is None or age >= idle_s:
            if confirmed:
                return IdleWait(True, clock.monotonic() - started)
            confirmed = True  # look once more, SETTLE_S later: a request accepted just now shows by then
            clock.sleep(SETTLE_S)
            continue
        confirmed = False
        need = idle_s - age
        if clock.monotonic() + need > deadline:
            return IdleWait(False, clock.monotonic() - started, age)
        clock.sleep(min(need, IDLE_POLL_S))


@dataclass
class Night:
    """One run's facts for its history event."""

    fired_at: float
    budget_s: float
    waited_s: float = 0.0
    numbers: dict[str, Any] = field(default_factory=dict)

    def event(self, deployment: Deployment, kind: str, sentence: str, **numbers: Any) -> None:
        detail = f"{sentence} | {json.dumps({**self.numbers, **numbers}, separators=(',', ':'))}"
        history = History(paths.db_path())
        try:
            history.event(deployment.unit, kind, detail)
        finally:
            history.close()


def nightly(config: Config, deployment: Deployment, *, seams: SeamsFactory, clients: ClientActivity | None = None,
            clock: Clock | None = None) -> Decision | None:
    """The daemon's cron job; returns the decision, or None when it did not decide (history says why).
    `seams` builds the deployment's seams in this thread (the daemon's factory: its restarts drain the proxy)."""
    tuner = config.tuner
    if not tuner.enabled:
        return None
    clock = clock or SYSTEM_CLOCK
    night = Night(fired_at=clock.monotonic(), budget_s=tuner.budget_minutes * 60.0)
    deadline = night.fired_at + night.budget_s
    night.numbers = {"budget_s": round(night.budget_s, 1), "idle_s": round(tuner.idle_minutes * 60.0, 1)}
    pin = pin_in_force(deployment.unit, clock.time())
    if pin is not None:
        night.event(deployment, "tune-skip",
                    f"pinned to {pin.profile}" + (f" for the {pin.period}" if pin.period else ""))
        return None
    log.info("%s: nightly run: waiting for %g idle minutes (budget %g minutes)", deployment.unit,
             tuner.idle_minutes, tuner.budget_minutes)
    wait = wait_for_idle(deployment, tuner.idle_minutes * 60.0, deadline, clients, clock)
    night.numbers["waited_idle_s"] = round(wait.waited_s, 1)
    if not wait.idle:
        age = wait.last_age_s or 0.0
        night.event(deployment, "tune-skip", f"no idle window within the budget: the last request ended "
                                             f"{age:.0f} s ago, the tuner waits for {tuner.idle_minutes:g} idle "
                                             f"minutes and had {max(deadline - clock.monotonic(), 0):.0f} s left")
        return None
    try:
        workload = resolve_workload(tuner.workload, deployment, tuner.n)
    except SpecdError as exc:
        night.event(deployment, "tune-failed", str(exc).splitlines()[0])
        raise
    live = _active_profile(seams, deployment)
    facts = workload.facts()
    log.info("%s: nightly run: idle after %.0f s; benching on %s (%d requests, %s, concurrency %d)",
             deployment.unit, wait.waited_s, facts.source, facts.size, facts.class_mix, facts.concurrency)
    watch = TrafficWatch(clients or (lambda: (0, 0)), clock)
    sweep_base = _sweep_base(config, deployment, live, night)
    try:
        with watch:
            options: dict[str, Any] = {"workload": workload, "deadline": deadline, "trigger": "tuner",
                                       "stop": watch.arrived, "extra": night.numbers}
            if sweep_base is not None:
                axes = [parse_axis(text) for text in tuner.sweep]
                result = sweep_deployment(config, deployment, axes, seams=seams, base=sweep_base, **options).tune
            else:
                result = tune_deployment(config, deployment, seams=seams, **options)
    except SpecdError as exc:
        if watch.arrived.is_set():  # stopped by clients; putting the live profile back may itself have failed
            failed = None if isinstance(exc, Interrupted) else str(exc).splitlines()[0]
            _stopped(deployment, night, watch, live, facts.as_json(), clock, failed, _active_profile(seams, deployment))
            return None
        night.event(deployment, "tune-failed", str(exc).splitlines()[0])
        raise
    log.info("%s: %s", deployment.unit, result.decision.reason)
    _learn_routes(config, deployment, result.report, seams, live)
    return result.decision


def _learn_routes(config: Config, deployment: Deployment, report: Report, seams: SeamsFactory,
                  live: str | None) -> None:
    """The routing table from the same bench (specd.tune.routes): each class's route on its own evidence
    (a pinned deployment never gets here: the night skips it)."""
    own = seams(deployment)
    try:
        learned = learn_after_bench(deployment, report.results, own, margin=config.tuner.margin, active=live,
                                    pinned=None,
                                    source=f"night of {time.strftime('%Y-%m-%d')}, bench run {report.run_id}, "
                                           f"{report.traffic.get('size', '?')} recorded requests")
        if learned is not None:
            log.info("%s: routing table: %s", deployment.unit, learned.sentence())
    except SpecdError as exc:
        log.error("%s: the routing table was not learned: %s", deployment.unit, exc)
    finally:
        own.close()


def _stopped(deployment: Deployment, night: Night, watch: TrafficWatch, live: str | None,
             traffic_facts: dict[str, Any], clock: Clock, failed: str | None, now_on: str | None) -> None:
    """Record a run stopped by clients: when, how long the live profile took to come back (or why it did
    not: `failed`, the switch's error; the switch then reverted to a healthy unit), and that nothing was decided."""
    seen = watch.seen_at if watch.seen_at is not None else clock.monotonic()
    restore_s = clock.monotonic() - seen
    hold = deployment.proxy.hold_timeout_s if deployment.proxy is not None else None
    back = (f"put back {restore_s:.1f} s later" if now_on == live and failed is None
            else f"not put back ({failed or 'the switch did not take'}); the unit is on {now_on or 'nothing'}")
    night.event(deployment, "tune-stopped",
                f"stopped: clients sent requests {seen - night.fired_at:.0f} s into the run; {live or 'nothing'} "
                f"{back}; no decision",
                live=live, now_on=now_on, restore_s=round(restore_s, 1), hold_timeout_s=hold, restore_error=failed,
                traffic=traffic_facts)
    log.info("%s: nightly run stopped by client traffic; %s restored in %.1f s", deployment.unit, live, restore_s)


def _sweep_base(config: Config, deployment: Deployment, live: str | None, night: Night) -> str | None:
    """The profile `[tuner] sweep` varies tonight: the live one, when it speculates; else None (and why, in
    the night's numbers: the run then compares the candidates as usual)."""
    if not config.tuner.sweep:
        return None
    if live is None:
        night.numbers["sweep"] = "skipped: no profile is active to sweep"
        return None
    try:
        speculates = load_profile(deployment.profiles_dir, live).speculative.type != "none"
    except ProfileError as exc:
        night.numbers["sweep"] = f"skipped: {live} does not load: {str(exc).splitlines()[0]}"
        return None
    if not speculates:
        night.numbers["sweep"] = f"skipped: {live} does not speculate (type = \"none\"); compared the candidates"
        return None
    return live


def _active_profile(seams: SeamsFactory, deployment: Deployment) -> str | None:
    own = seams(deployment)
    try:
        return Switcher(own, trigger="tuner").active_profile()
    finally:
        own.close()
