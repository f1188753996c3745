"""The daemon's health monitor: notices a dead or wedged llama-server and brings it back.

One round checks the alias endpoint (health + alias listed; no completion, so a round costs the
server nothing). After `failures_before_restart` failed rounds in a row it acts, under the
deployment lock taken without waiting, so it never fights a switch in progress (a busy lock means
someone else owns the unit right now: the round is skipped and the count starts over):

- if the unit's newest generation is younger than `rollback_grace_s` (and not the daemon's own),
  the new profile is the likely culprit: roll back (a generation with trigger "daemon");
- otherwise restart the unit (draining the proxy first) and wait for it to turn healthy.

Every action lands in the history's event log and the journal.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

import httpx

from specd.profiles.config import DaemonConfig, Deployment
from specd.errors import HealthError, LockBusy, SpecdError, UsageError
from specd.deploy.health import HealthResult, check_once, wait_healthy
from specd.deploy.history import Generation, History
from specd.deploy.lock import deployment_lock
from specd.unit.render import profile_of_unit
from specd.context import switcher_for, systemd_for
from specd.deploy.systemd import SystemdClient
from specd.deploy.unitfiles import read_text
from specd.unit.parse import parse_unit

log = logging.getLogger(__name__)

Action = Literal["none", "wait", "restart", "rollback"]


def decide(failures: int, threshold: int, newest: Generation | None, grace_s: float, now: datetime) -> Action:
    """What to do after `failures` failed rounds in a row (pure; the monitor's whole policy)."""
    if failures == 0:
        return "none"
    if failures < threshold:
        return "wait"
    recent_change = newest is not None and newest.outcome == "ok" and newest.previous_id is not None
    if newest is not None and recent_change and newest.trigger != "daemon":  # never walk back twice
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

    def as_dict(self) -> dict[str, object]:
        return {
            "healthy": None if self.last is None else self.last.ok,
            "detail": None if self.last is None else self.last.detail,
            "checked_at": self.last_checked,
            "consecutive_failures": self.failures,
            "last_action": self.last_action,
            "last_action_at": self.last_action_at,
        }


class HealthMonitor:
    def __init__(self, deployment: Deployment, settings: DaemonConfig, *,
                 systemd: SystemdClient | None = None, history: History | None = None,
                 on_result: Callable[[HealthResult], None] = lambda result: None,
                 on_action: Callable[[str, str], None] = lambda action, detail: None) -> None:
        self.deployment = deployment
        self.settings = settings
        self._systemd = systemd
        self.history = history or History()
        self.state = MonitorState()
        self._on_result, self._on_action = on_result, on_action
        self._http = httpx.Client(timeout=httpx.Timeout(10.0, connect=2.0))

    @property
    def systemd(self) -> SystemdClient:
        if self._systemd is None:
            self._systemd = systemd_for(self.deployment)
        return self._systemd

    @property
    def unit(self) -> str:
        return self.deployment.unit

    def close(self) -> None:
        self._http.close()

    def check(self) -> HealthResult | None:
        """One probe of the installed unit's alias endpoint; None when there is no unit to watch."""
        text = read_text(self.deployment.unit_path)
        if text is None:
            return None
        try:
            command = parse_unit(text, str(self.deployment.unit_path))
        except UsageError as exc:
            return HealthResult(False, str(exc))
        return check_once(self._http, command.base_url, command.alias or "")

    def tick(self) -> Action:
        """One round: check, count, and act when the count says so."""
        result = self.check()
        if result is None:
            self.state = MonitorState()
            return "none"
        self.state.last, self.state.last_checked = result, time.time()
        self._on_result(result)
        self.state.failures = 0 if result.ok else self.state.failures + 1
        if not result.ok:
            log.warning("%s: health check failed (%d in a row): %s", self.unit, self.state.failures, result.detail)
        newest = next(iter(self.history.list(self.unit, limit=1)), None)
        action = decide(self.state.failures, self.settings.failures_before_restart, newest,
                        self.settings.rollback_grace_s, datetime.now(UTC))
        if action in ("restart", "rollback"):
            self._act(action, result.detail)
        return action

    def _act(self, action: Action, reason: str) -> None:
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
        else:
            log.warning("%s: %s", self.unit, detail)
            self._on_action(action, detail)
        self.state.failures = 0
        self.state.last_action, self.state.last_action_at = f"{action}: {detail}", time.time()

    def _restart(self, reason: str) -> str:
        with deployment_lock(self.unit, "daemon: restart after failed health checks", timeout_s=0):
            text = read_text(self.deployment.unit_path)
            if text is None:
                return "unit file is gone; nothing to restart"
            command = parse_unit(text, str(self.deployment.unit_path))
            self.systemd.reset_failed(self.unit)
            self.systemd.restart(self.unit)
            try:
                health = wait_healthy(command.base_url, command.alias or "", timeout_s=600.0, stability_s=2.0,
                                      unit_state=lambda: self.systemd.unit_state(self.unit))
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
        no_wait = dataclasses.replace(self.deployment, lock_timeout_s=0.0)
        outcome = Switcher(no_wait, trigger="daemon", systemd=self.systemd, history=self.history).rollback()
        generation = outcome.generation
        detail = (f"rolled back to {generation.profile} (generation {generation.id}) after "
                  f"{self.settings.failures_before_restart} failed checks within "
                  f"{self.settings.rollback_grace_s:.0f} s of a switch ({reason})")
        self.history.event(self.unit, "daemon-rollback", detail)
        return detail
