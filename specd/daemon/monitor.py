"""The daemon's health monitor: notices a dead or wedged llama-server and brings it back, or
says clearly that it could not.

One round reads the unit's state, then checks the alias endpoint (health + alias listed; no
completion, so a round costs the server nothing). It watches the slot that serves (the unit
itself, or its green companion after a blue-green switch: specd.deploy.slots). The policy
(`decide`, pure) always ends in a
healthy endpoint or a clear alarm:

- a unit its owner stopped (`systemctl stop`, `specd`'s own stop: inactive with result success) is
  left stopped and reported as such (`owner-stopped`), until it runs again (`owner-started`);
- a unit systemd itself is restarting (`Restart=` after a crash: sub-state `auto-restart`) is left
  to systemd: acting too would restart it twice, or roll back a profile one bad request crashed;
- after `failures_before_restart` failed rounds in a row, if the newest generation is a change
  younger than `rollback_grace_s` (and not the daemon's own), roll back once;
- otherwise, or when that rollback is impossible or fails, restart: a server that does not answer
  is killed first (SIGKILL), not waited on for its stop timeout;
- after `MAX_ATTEMPTS` actions that did not bring it back, stop trying, record `monitor-failed`
  (shown by `specd status`) and wait for the endpoint to answer again or the owner to act.

Actions run under the deployment lock taken without waiting, so the monitor never fights a switch
in progress (a busy lock skips the round). Every action lands in the history's event log and the
journal.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from specd.clock import utc_now
from specd.deploy.health import HealthResult, check_once, wait_healthy
from specd.deploy.history import Generation
from specd.deploy.plan import DEFAULT_GATE_TIMEOUT_S
from specd.deploy.seams import Seams
from specd.deploy.switch import Switcher
from specd.deploy.systemd import SystemdClient, UnitState
from specd.deploy.unitfiles import read_text
from specd.errors import HealthError, LockBusy, SpecdError, UsageError
from specd.profiles.config import DaemonConfig
from specd.unit.parse import parse_unit
from specd.unit.render import profile_of_unit

log = logging.getLogger(__name__)

Action = Literal["none", "wait", "restart", "rollback", "give-up", "alarmed", "owner-stopped"]
MAX_ATTEMPTS = 3  # restarts/rollbacks in one episode of failures before the monitor raises the alarm


@dataclass
class Episode:
    """One run of failed checks, from the first failure to the next healthy answer."""

    attempts: int = 0
    rolled_back: bool = False  # a rollback was tried (done or failed): never twice in one episode
    alarmed: bool = False


def owner_stopped(state: UnitState) -> bool:
    """Stopped on purpose: inactive after a clean stop. A crash leaves `failed` or a restart loop."""
    return state.active_state == "inactive" and state.result == "success"


def decide(failures: int, threshold: int, newest: Generation | None, grace_s: float, now: datetime,
           episode: Episode | None = None) -> Action:
    """What to do after `failures` failed rounds in a row (pure; the monitor's whole policy)."""
    episode = episode or Episode()
    if failures == 0:
        return "none"
    if failures < threshold:
        return "wait"
    if episode.alarmed:
        return "alarmed"
    if episode.attempts >= MAX_ATTEMPTS:
        return "give-up"
    recent_change = newest is not None and newest.outcome == "ok" and newest.previous_id is not None
    if newest is not None and recent_change and newest.trigger != "daemon" and not episode.rolled_back:
        age_s = (now - datetime.fromisoformat(newest.created_at)).total_seconds()
        if age_s <= grace_s:
            return "rollback"
    return "restart"


@dataclass
class MonitorState:
    failures: int = 0
    last: HealthResult | None = None
    last_checked: float | None = None
    last_action: str | None = None
    last_action_at: float | None = None
    episode: Episode = dataclasses.field(default_factory=Episode)
    stopped_by_owner: bool = False

    def as_dict(self) -> dict[str, object]:
        return {
            "healthy": None if self.last is None else self.last.ok,
            "detail": None if self.last is None else self.last.detail,
            "checked_at": self.last_checked,
            "consecutive_failures": self.failures,
            "last_action": self.last_action,
            "last_action_at": self.last_action_at,
            "failed": self.episode.alarmed,
            "stopped_by_owner": self.stopped_by_owner,
        }


class HealthMonitor:
    """Runs on the scheduler's threads over seams of its own."""

    def __init__(self, seams: Seams, settings: DaemonConfig, *,
                 on_result: Callable[[HealthResult], None] = lambda result: None,
                 on_action: Callable[[str, str], None] = lambda action, detail: None) -> None:
        self.seams = seams
        self.deployment = seams.deployment
        self.settings = settings
        self.history = seams.history
        self._clock = seams.clock
        self.state = MonitorState()
        self._on_result, self._on_action = on_result, on_action
        # A hung server accepts connections and never answers: the read timeout bounds each round, so a
        # hang is acted on within failures_before_restart x (interval + timeout).
        probe_timeout_s = max(1.0, min(10.0, settings.health_interval_s))
        self._http = seams.http(probe_timeout_s)
        self._stop_rounds = 0

    @property
    def systemd(self) -> SystemdClient:
        return self.seams.systemd

    @property
    def unit(self) -> str:
        return self.deployment.unit

    def close(self) -> None:
        self._http.close()

    def check(self) -> HealthResult | None:
        """One probe of the installed unit's alias endpoint; None when there is no unit to watch."""
        text = read_text(self.seams.serving().unit_path)
        if text is None:
            return None
        try:
            command = parse_unit(text, str(self.seams.serving().unit_path))
        except UsageError as exc:
            return HealthResult(False, str(exc))
        return check_once(self._http, command.base_url, command.alias, api_key=command.api_key)

    def _owner_stop_seen(self) -> bool:
        """Notice (and record once) a deliberate stop, and the start that ends it. True while the
        unit is stopping, stopped on purpose or being restarted by systemd itself (`Restart=`): such a
        round checks nothing and counts no failure."""
        try:
            state = self.systemd.unit_state(self.seams.serving().unit)
        except SpecdError as exc:
            log.warning("%s: cannot read the unit's state: %s", self.unit, exc.message)
            return False
        if state.active_state == "deactivating" or state.sub_state.startswith("auto-restart"):
            return True  # a stop, or systemd's own restart after a crash, is under way: let it finish
        stopped = owner_stopped(state)
        # A restart passes through `inactive` for an instant: believe a stop seen on two rounds in a row.
        self._stop_rounds = self._stop_rounds + 1 if stopped else 0
        if stopped and self._stop_rounds < 2:
            return True
        if stopped != self.state.stopped_by_owner:
            if stopped:
                kind = "owner-stopped"
                detail = f"{self.unit} was stopped on purpose; the daemon leaves it stopped until it is started again"
            else:
                kind, detail = "owner-started", f"{self.unit} runs again; the daemon watches it"
            self.history.event(self.unit, kind, detail)
            log.warning("%s: %s", self.unit, detail)
            self.state.stopped_by_owner = stopped
            self.state = dataclasses.replace(self.state, failures=0, episode=Episode())
        return stopped

    def tick(self) -> Action:
        """One round: check, count, and act when the count says so."""
        if read_text(self.seams.serving().unit_path) is None:
            self.state = MonitorState()
            return "none"
        if self._owner_stop_seen():
            return "owner-stopped"
        result = self.check()
        if result is None:
            self.state = MonitorState()
            return "none"
        self.state.last, self.state.last_checked = result, self._clock.time()
        self._on_result(result)
        self.state.failures = 0 if result.ok else self.state.failures + 1
        if result.ok:
            if self.state.episode.alarmed:
                self.history.event(self.unit, "owner-started", f"{self.unit} answers again; the alarm is cleared")
            self.state.episode = Episode()
            return "none"
        log.warning("%s: health check failed (%d in a row): %s", self.unit, self.state.failures, result.detail)
        newest = next(iter(self.history.list(self.unit, limit=1)), None)
        action = decide(self.state.failures, self.settings.failures_before_restart, newest,
                        self.settings.rollback_grace_s, utc_now(self._clock), self.state.episode)
        if action in ("restart", "rollback"):
            self._act(action, result.detail)
        elif action == "give-up":
            self._give_up(result.detail)
        return action

    def _give_up(self, reason: str) -> None:
        detail = (f"{self.unit} is still unhealthy after {self.state.episode.attempts} restarts/rollbacks "
                  f"({reason}); the daemon stopped trying — fix the profile or the box, then `specd switch` "
                  "or `systemctl start` it")
        self.state.episode.alarmed = True
        log.error("%s: %s", self.unit, detail)
        self.history.event(self.unit, "monitor-failed", detail)
        self._on_action("failed", detail)
        self.state.last_action, self.state.last_action_at = f"give-up: {detail}", self._clock.time()

    def _act(self, action: Action, reason: str) -> None:
        if action == "rollback":
            self.state.episode.rolled_back = True
        try:
            detail = self._rollback(reason) if action == "rollback" else self._restart(reason)
        except LockBusy as busy:
            log.info("%s: %s skipped this round: %s", self.unit, action, busy.message)
            self.state.failures = 0
            return
        except SpecdError as failure:
            detail = f"{action} failed: {failure.message}"
            log.error("%s: %s", self.unit, detail)
            self.history.event(self.unit, f"daemon-{action}-failed", detail)
            self._on_action(f"{action}-failed", detail)
            if action == "rollback":  # nothing to roll back to, or it failed: restart right away
                self.state.last_action, self.state.last_action_at = f"{action}: {detail}", self._clock.time()
                self._act("restart", reason)
                return
        else:
            log.warning("%s: %s", self.unit, detail)
            self._on_action(action, detail)
        self.state.episode.attempts += 1
        self.state.failures = 0
        self.state.last_action, self.state.last_action_at = f"{action}: {detail}", self._clock.time()

    def _restart(self, reason: str) -> str:
        with self.seams.lock("daemon: restart after failed health checks", timeout_s=0):
            serving = self.seams.serving()  # read under the lock: no switch moves it now
            text = read_text(serving.unit_path)
            if text is None:
                return "unit file is gone; nothing to restart"
            command = parse_unit(text, str(serving.unit_path))
            if self.systemd.unit_state(serving.unit).running:
                self.systemd.kill(serving.unit, signal.SIGKILL)  # it does not answer: don't wait out its stop timeout
            self.systemd.reset_failed(serving.unit)
            with self.seams.proxy.drained(serving.unit):  # clients wait at the proxy's gate, not fail
                self.systemd.restart(serving.unit)
            try:
                health = wait_healthy(command.base_url, command.alias, api_key=command.api_key,
                                      timeout_s=DEFAULT_GATE_TIMEOUT_S, stability_s=2.0,
                                      unit_state=lambda: self.systemd.unit_state(serving.unit))
            except HealthError as exc:
                detail = f"restarted after {self.settings.failures_before_restart} failed checks ({reason}); " \
                         f"still unhealthy: {exc.message}"
                self.history.event(self.unit, "daemon-restart", detail)
                raise HealthError(detail) from exc
            detail = (f"restarted {profile_of_unit(text) or 'the unit'} after "
                      f"{self.settings.failures_before_restart} failed checks ({reason}); healthy "
                      f"after {health.total_s:.1f} s")
            self.history.event(self.unit, "daemon-restart", detail)
            return detail

    def _rollback(self, reason: str) -> str:
        no_wait = dataclasses.replace(self.seams, deployment=dataclasses.replace(self.deployment, lock_timeout_s=0.0))
        outcome = Switcher(no_wait, trigger="daemon").rollback()
        generation = outcome.generation
        detail = (f"rolled back to {generation.profile} (generation {generation.id}) after "
                  f"{self.settings.failures_before_restart} failed checks within "
                  f"{self.settings.rollback_grace_s:.0f} s of a switch ({reason})")
        self.history.event(self.unit, "daemon-rollback", detail)
        return detail
