"""The transaction engine: a plan of named, reversible steps, run forward and reverted backward.

Each `Step` has a name, the action that does it, the undo that puts back what it changed, what it
touches (the unit file, the slot pointer, the proxy, a server...) and what its undo will need,
saved before anything changes (`save`). A `Plan` is the steps of one strategy in order: restart
in place, blue-green beside the old server, or a shadow bench's candidate in the free slot
(`specd.deploy.steps.PLANS`). Adding a step is one `Step` there and its place in a plan.

`begin` writes the intent record (specd.deploy.intent) with every step's saved values; `apply`
runs the steps and records each one done in the intent before its fault point (`SPECD_FAULT=<step>`
kills the process there) and the step hook hear of it. `revert` walks the steps begun backwards
and undoes each: those recorded done, and the one after them, which may have begun when the
process died (a kill between a step's action and its record). So every undo checks before it acts
and does nothing when its step had not begun or was already undone, and a revert cut short by a
kill is simply run again by the next one. Recovery (`specd recover`, the next switch, the daemon)
reads the intent from disk and reverts it the same way: the same plan, the same undos.

firewalld's `fw_transaction` registers an undo with each action and tuned saves each value before
changing it; neither keeps that on disk, so a crash between two steps leaves them half-applied.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from specd.deploy import intent as intents
from specd.deploy.health import HealthResult
from specd.deploy.plan import HealthGate, Target
from specd.deploy.priority import Lowered
from specd.deploy.seams import Seams
from specd.deploy.slots import Slot, slot

Touch = Literal["backup file", "unit file", "service manager", "server", "slot pointer", "proxy",
                "boot enablement", "nothing"]


@dataclass
class Run:
    """One transaction's state as its steps see it: the seams, the intent, and what was found so far.

    `target` and `current` exist only going forward; an undo works from the intent and the seams
    alone, because recovery in another process has nothing else."""

    seams: Seams
    intent: intents.Intent
    gate: HealthGate
    passed: Callable[[str, str], None]  # a fault point and the step hook: (name, detail)
    target: Target | None = None  # what is being installed (forward only)
    current: str | None = None  # the serving unit's text when it began (forward only)
    started: float = 0.0  # when the new server's start began (monotonic)
    restart_s: float = 0.0
    health: HealthResult | None = None
    lowered: Lowered | str | None = None  # the new server's loading priority (blue-green)
    notes: list[str] = field(default_factory=list)
    acted: bool = False  # an undo changed something
    restarted: bool = False  # the revert restarted the old server
    undone: set[str] = field(default_factory=set)  # steps an earlier undo of this revert undid already

    @property
    def old(self) -> Slot:
        """The slot that served when the transaction began."""
        return slot(self.seams.deployment, self.intent.old_slot)

    @property
    def new(self) -> Slot:
        """The slot the new unit goes into (the same as `old` for a restart)."""
        return slot(self.seams.deployment, self.intent.slot)

    @property
    def installing(self) -> Target:
        if self.target is None:  # pragma: no cover - a plan that reads its target in an undo is a bug
            raise AssertionError("a step's action runs forward only; an undo has no target")
        return self.target


@dataclass(frozen=True)
class Step:
    name: str
    touches: tuple[Touch, ...]
    action: Callable[[Run], str]  # does the step; returns what the step hook is told
    undo: Callable[[Run], bool] | None = None  # puts it back (checks first); True when it changed anything
    save: Callable[[Run], dict[str, Any]] | None = None  # what the undo needs, read before anything changes
    undo_points: tuple[str, ...] = ()  # the fault points its undo passes, in order


@dataclass(frozen=True)
class Plan:
    name: intents.PlanName
    steps: tuple[Step, ...]
    settled: Callable[[Run], str]  # after every undo: makes sure the old server serves; says how it ended

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(step.name for step in self.steps)

    def revert_points(self) -> tuple[str, ...]:
        """Every fault point a full revert passes, in the order it passes them."""
        points: list[str] = []
        for step in reversed(self.steps):
            points += [point for point in step.undo_points if point not in points]
        return tuple(points)

    def begun(self, done: list[str]) -> list[Step]:
        """The steps recorded done, and the next one (it may have begun before a kill)."""
        count = sum(1 for step in self.steps if step.name in done)
        return list(self.steps[:count + 1])


class Transaction:
    """Runs a plan over a `Run`, keeping the intent record at `path` (one per deployment and kind)."""

    def __init__(self, plan: Plan, run: Run, path: Path) -> None:
        if run.intent.strategy != plan.name:
            raise ValueError(f"an intent of the {run.intent.strategy} plan cannot run the {plan.name} plan")
        self.plan, self.run, self.path = plan, run, path

    @property
    def intent(self) -> intents.Intent:
        return self.run.intent

    def begin(self) -> None:
        """Save what each step's undo needs, then write the intent: from here on a crash is undone."""
        for step in self.plan.steps:
            if step.save is not None:
                self.intent.saved[step.name] = step.save(self.run)
        intents.save(self.intent, self.path)

    def apply(self) -> None:
        """Every step in order; raises on any failure (the caller reverts)."""
        for step in self.plan.steps:
            detail = step.action(self.run)
            self.intent.done.append(step.name)
            self.intent.step = step.name
            intents.save(self.intent, self.path)
            self.run.passed(step.name, detail)

    def revert(self) -> str:
        """Undo the steps begun, last first; returns a sentence on the state reached. The intent stays
        on disk until `clear`: a revert that fails or is killed is run again by recovery."""
        for step in reversed(self.plan.begun(self.intent.done)):
            if step.undo is not None and step.name not in self.run.undone and step.undo(self.run):
                self.run.acted = True
        return self.plan.settled(self.run)

    def clear(self) -> None:
        intents.clear(self.path)
