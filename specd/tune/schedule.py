"""The per-period pins, applied: the daemon's job that switches when a time of day begins and ends.

`specd pin NAME --period afternoon` (or `specd tune-levels --apply`) pins a profile to a time of
day — the periods of specd.tune.workloads, local time: night 0-6, morning 6-12, afternoon 12-18,
evening 18-24. The daemon checks every `[daemon] schedule_check_s`. When a pinned period begins it
switches to that period's profile; when it ends and the next period has no pin, it switches back to
the profile chosen outside the schedule (the newest healthy generation that neither the schedule nor
a bench made: a person's switch, the tuner's, a rollback).

It acts on a change only — a period beginning or ending, a pin set or removed — so a switch made by
hand inside a period stands until the next change. It starts nothing: while the server is not
running (stopped by its owner, or down and the health monitor's to mend) the move waits. An all-day
pin (`specd pin NAME`) holds everything: the schedule waits until it is removed.

`next_move` and `chosen_outside` are pure (unit-tested in milliseconds); `ScheduleJob` reads the
pins and the history and switches over the seams it is given (the daemon's: its proxy drains).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial

from specd.clock import SYSTEM_CLOCK, Clock
from specd.deploy.history import Generation, Trigger
from specd.deploy.seams import Seams, SeamsFactory
from specd.deploy.switch import Switcher
from specd.errors import LockBusy, SpecdError
from specd.profiles.config import Deployment
from specd.tune.periods import Period, period_of
from specd.tune.pins import get_pin, period_pins

log = logging.getLogger("specd.tune.schedule")

SCHEDULE_SWITCHER: Callable[[Seams], Switcher] = partial(Switcher, trigger="schedule")
NOT_A_CHOICE: frozenset[Trigger] = frozenset({"schedule", "bench", "verify"})  # moves that choose nothing


@dataclass(frozen=True)
class Seen:
    """What the schedule asked for at one check: the period, and its pin (None: no pin for it)."""

    period: Period
    wanted: str | None


@dataclass(frozen=True)
class Move:
    profile: str
    reason: str


def next_move(now: Seen, last: Seen | None, active: str | None, chosen: str | None) -> Move | None:
    """The switch the schedule makes at this check (None: none). `last` is the previous check's view
    (None: the daemon just started), `active` the profile installed now, `chosen` the one chosen outside
    the schedule (what an unpinned period returns to)."""
    if now == last:
        return None  # nothing changed: whatever happened inside the period stands
    if now.wanted is not None:
        return None if active == now.wanted else Move(now.wanted, f"the {now.period} pin")
    if last is None or last.wanted is None or active != last.wanted:
        return None  # the schedule put nothing in place, or something else moved it since: leave it
    if chosen is None or chosen == active:
        return None
    ended = "was removed" if last.period == now.period else "ended"
    return Move(chosen, f"the {last.period} pin {ended}; back to the profile chosen outside the schedule")


def chosen_outside(generations: Iterable[Generation]) -> str | None:
    """The profile of the newest healthy generation the schedule or a bench did not make (newest first in)."""
    for generation in generations:
        if generation.outcome == "ok" and generation.trigger not in NOT_A_CHOICE and generation.profile:
            return generation.profile
    return None


class ScheduleJob:
    """One deployment's schedule check (the daemon runs it every `[daemon] schedule_check_s`)."""

    def __init__(self, deployment: Deployment, *, seams: SeamsFactory, clock: Clock = SYSTEM_CLOCK,
                 switcher: Callable[[Seams], Switcher] = SCHEDULE_SWITCHER) -> None:
        self.deployment = deployment
        self.seams = seams
        self.clock = clock
        self.switcher = switcher
        self.last: Seen | None = None

    def __call__(self) -> Move | None:
        unit = self.deployment.unit
        if get_pin(unit) is not None:
            return None  # an all-day pin holds everything
        period = period_of(self.clock.time())
        pin = period_pins(unit).get(period)
        now = Seen(period, pin.profile if pin else None)
        if now == self.last:
            return None
        own = self.seams(self.deployment)
        try:
            if own.systemd.unit_state(own.serving().unit).active_state != "active":
                return None  # starts nothing: the move waits until the server runs again
            switcher = self.switcher(own)
            active = switcher.active_profile()
            move = next_move(now, self.last, active, chosen_outside(own.history.list(unit, limit=200)))
            if move is not None:
                try:
                    switcher.switch(move.profile)
                except LockBusy:
                    return None  # another switch holds the lock: the next check tries again
                except SpecdError as exc:
                    self.last = now  # the switch reverted itself; the schedule does not fight on
                    own.history.event(unit, "schedule-failed", f"{move.reason}: switching to {move.profile} "
                                                               f"failed: {str(exc).splitlines()[0]}")
                    raise
                own.history.event(unit, "schedule", f"{move.reason}: switched to {move.profile} "
                                                    f"(was {active or 'nothing'})")
                log.info("%s: %s: switched to %s", unit, move.reason, move.profile)
            self.last = now
            return move
        finally:
            own.close()
