"""What the page may do: switch, rollback, pin, unpin, run a bench now.

Each runs exactly what the CLI runs (the same Switcher over the same seams, the same pin table,
the same tuner), with `trigger="web"` in history. Switches, rollbacks and benches run off the
event loop through `submit` (the daemon's job scheduler, so SIGTERM lets one in progress finish),
one at a time per deployment; every step of the transaction and its health gate is published to
the page as it passes. Bad input raises UsageError before anything starts.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Literal

from specd.context import seams_for, switcher_for
from specd.errors import SpecdError, UsageError
from specd.profiles.config import Config, Deployment
from specd.profiles.load import load_profile
from specd.tune.pins import clear_pin, set_pin
from specd.web.events import EventHub

log = logging.getLogger(__name__)

ActionKind = Literal["switch", "rollback", "pin", "unpin", "bench"]
KINDS: tuple[ActionKind, ...] = ("switch", "rollback", "pin", "unpin", "bench")
Submit = Callable[[str, Callable[[], None]], None]  # (job name, work): run work off the event loop


@dataclass
class Action:
    id: int
    unit: str
    kind: ActionKind
    profile: str | None
    state: Literal["running", "ok", "failed"] = "running"
    message: str = ""
    started_at: float = 0.0
    finished_at: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def bench_now(config: Config, deployment: Deployment) -> str:
    """The tuner's bench and decision, without switching (a dry run): the page shows the result."""
    from specd.tune.tuner import tune_deployment

    result = tune_deployment(config, deployment, seams=seams_for, dry_run=True, trigger="web",
                             budget_s=config.tuner.budget_minutes * 60.0)
    return result.decision.reason


class Actions:
    def __init__(self, config: Config, deployments: list[Deployment], hub: EventHub, submit: Submit, *,
                 bench: Callable[[Config, Deployment], str] = bench_now) -> None:
        self.config = config
        self.deployments = {d.unit: d for d in deployments}
        self.hub = hub
        self._submit = submit
        self._bench = bench
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()
        self.running: dict[str, Action] = {}

    def deployment(self, unit: str) -> Deployment:
        try:
            return self.deployments[unit]
        except KeyError:
            raise UsageError(f"no deployment for unit '{unit}' (configured: {', '.join(self.deployments)})") from None

    def start(self, unit: str, kind: str, profile: str | None = None) -> Action:
        deployment = self.deployment(unit)
        if kind not in KINDS:
            raise UsageError(f"unknown action '{kind}' (one of {', '.join(KINDS)})")
        if kind in ("switch", "pin"):
            if not profile:
                raise UsageError(f"{kind} needs a profile")
            load_profile(deployment.profiles_dir, profile)  # a ProfileError names the file and the key
        action = Action(next(self._numbers), unit, kind, profile, started_at=time.time())
        if kind in ("pin", "unpin"):
            self._publish(action)
            self._run(action, deployment)
            return action
        with self._lock:
            busy = self.running.get(unit)
            if busy is not None:
                raise UsageError(f"{unit}: a {busy.kind} started from this page is still running")
            self.running[unit] = action
        self._publish(action)
        self._submit(f"web-{kind}-{action.id}", lambda: self._run(action, deployment))
        return action

    def _publish(self, action: Action) -> None:
        self.hub.publish("action", **action.as_dict())

    def _step(self, action: Action, step: str, detail: str) -> None:
        self.hub.publish("step", action=action.id, unit=action.unit, step=step, detail=detail)

    def _run(self, action: Action, deployment: Deployment) -> None:
        try:
            action.message = self._perform(action, deployment)
            action.state = "ok"
        except SpecdError as exc:
            action.state, action.message = "failed", str(exc)
        except Exception as exc:  # a bug: say so on the page, keep the daemon up
            log.exception("web action %s on %s failed", action.kind, action.unit)
            action.state, action.message = "failed", f"internal error: {type(exc).__name__}: {exc}"
        finally:
            action.finished_at = time.time()
            with self._lock:
                if self.running.get(action.unit) is action:
                    del self.running[action.unit]
            self._publish(action)

    def _perform(self, action: Action, deployment: Deployment) -> str:
        if action.kind == "pin":
            assert action.profile is not None
            set_pin(deployment.unit, action.profile)
            return f"pinned {deployment.unit} to {action.profile}: the tuner will not switch it"
        if action.kind == "unpin":
            old = clear_pin(deployment.unit)
            return f"unpinned {deployment.unit} (was {old.profile})" if old else f"{deployment.unit} was not pinned"
        if action.kind == "bench":
            return self._bench(self.config, deployment)
        switcher = switcher_for(deployment, trigger="web",
                                on_step=lambda step, detail: self._step(action, step, detail))
        try:
            if action.kind == "switch":
                assert action.profile is not None
                outcome = switcher.switch(action.profile)
            else:
                outcome = switcher.rollback()
        finally:
            switcher.history.close()
        generation = outcome.generation
        if outcome.unchanged:
            return f"already on profile {generation.profile}"
        verb = "switched" if action.kind == "switch" else "rolled back"
        return (f"{verb}: profile {generation.profile} is healthy (generation {generation.id}; "
                f"total {generation.total_s or 0:.1f} s)")
