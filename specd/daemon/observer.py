"""What changed since the last look: new generations and events in history, and how long each
endpoint has been unhealthy. The daemon polls it every second; it tells the status page (a
`publish` callback) and the notifier what happened, whoever did it — the CLI, the page, the
health monitor or the tuner — because they all write the same history.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from specd.daemon.monitor import MonitorState
from specd.daemon.notifications import Notice, Notifier
from specd.deploy.history import Generation, History, split_numbers
from specd.deploy.switch import JOURNAL_EVENT
from specd.errors import SpecdError
from specd.profiles.config import Deployment

log = logging.getLogger(__name__)

Publish = Callable[..., Any]  # publish(kind, **data)
FINAL = ("ok", "reverted", "failed")
JOURNAL_LINES = 8
OBSERVE_S = 1.0  # how often history is read for news (the page's live timeline, notifications)


@dataclass
class _Seen:
    generation: int = 0
    event: int = 0
    pending: set[int] = field(default_factory=set)
    unhealthy_since: float | None = None
    health_noticed: bool = False


class HistoryObserver:
    def __init__(self, deployments: list[Deployment], *, notifier: Notifier | None = None,
                 publish: Publish | None = None, health_lost_s: float = 600.0,
                 clock: Callable[[], float] = time.monotonic, history: History) -> None:
        self.deployments = deployments
        self.notifier = notifier
        self.publish = publish
        self.health_lost_s = health_lost_s
        self._clock = clock
        self.history = history
        self._seen: dict[str, _Seen] = {}
        for deployment in deployments:  # only what happens from now on is news
            newest = next(iter(self.history.list(deployment.unit, 1)), None)
            last_event = next(iter(self.history.events(deployment.unit, 1)), None)
            self._seen[deployment.unit] = _Seen(newest.id if newest else 0, int(last_event["id"]) if last_event else 0)

    def close(self) -> None:
        self.history.close()

    def _unit_flag(self, deployment: Deployment) -> str:
        return f" --unit {deployment.name}" if len(self.deployments) > 1 else ""

    async def run(self, monitors: Callable[[], Mapping[str, MonitorState]], stop: asyncio.Event) -> None:
        """Poll every OBSERVE_S on the event loop (SQLite reads of a few rows) until `stop`."""
        while not stop.is_set():
            try:
                self.poll(monitors())
            except SpecdError as exc:
                log.warning("reading history for news: %s", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), OBSERVE_S)

    def poll(self, monitors: Mapping[str, MonitorState] | None = None) -> None:
        for deployment in self.deployments:
            seen = self._seen[deployment.unit]
            self._generations(deployment, seen)
            self._events(deployment, seen)
            if monitors is not None and deployment.unit in monitors:
                self._health(deployment, seen, monitors[deployment.unit])

    def _tell(self, notice: Notice) -> None:
        if self.notifier is not None:
            self.notifier.notify(notice)
        if self.publish is not None:
            self.publish("notice", unit=notice.unit, notice=notice.kind, headline=notice.headline)

    # ---- generations: switches, rollbacks, hand edits; auto-reverts ---------------------------------

    def _generations(self, deployment: Deployment, seen: _Seen) -> None:
        unit = deployment.unit
        fresh = [g for g in reversed(self.history.list(unit, 20)) if g.id > seen.generation]
        for generation in fresh:
            seen.generation = max(seen.generation, generation.id)
            seen.pending.add(generation.id)
            if self.publish is not None:
                self.publish("generation", unit=unit, id=generation.id, kind=generation.kind,
                             profile=generation.profile, outcome=generation.outcome)
        for generation_id in sorted(seen.pending):
            current = self.history.get(generation_id)
            if current is None or current.outcome not in FINAL:
                continue
            seen.pending.discard(generation_id)
            if self.publish is not None and (current.outcome != "ok" or generation_id not in {g.id for g in fresh}):
                self.publish("generation", unit=unit, id=current.id, kind=current.kind,
                             profile=current.profile, outcome=current.outcome)
            if current.outcome in ("reverted", "failed"):
                self._tell(self._auto_revert(deployment, current))

    def _journal(self, unit: str, generation_id: int) -> str:
        for event in self.history.events(unit, 50):
            first, _, lines = str(event["detail"]).partition("\n")
            if event["kind"] == JOURNAL_EVENT and first == f"generation {generation_id}":
                return "\n".join(lines.splitlines()[-JOURNAL_LINES:])
        return ""

    def _profile_of(self, generation_id: int | None) -> str | None:
        previous = self.history.get(generation_id) if generation_id is not None else None
        return previous.profile if previous is not None else None

    def _auto_revert(self, deployment: Deployment, generation: Generation) -> Notice:
        before = self._profile_of(generation.previous_id) or "the previous unit"
        journal = self._journal(deployment.unit, generation.id)
        what = (f"{generation.kind} to {generation.profile} (by {generation.trigger}) did not come up healthy: "
                f"{generation.detail}")
        if generation.outcome == "reverted":
            what += f"\nspecd put {before} back; it is healthy again."
            undo = (f"nothing to undo: the box is back on {before}. Retry after fixing: "
                    f"specd switch {generation.profile}{self._unit_flag(deployment)}")
        else:
            what += "\nthe revert failed too: check `specd status`."
            undo = f"specd status{self._unit_flag(deployment)}; specd rollback{self._unit_flag(deployment)}"
        if journal:
            what += f"\n--- journal ---\n{journal}"
        return Notice("auto-revert", deployment.unit, f"{generation.kind} to {generation.profile} reverted",
                      what, undo, severity="failure")

    # ---- events: the health monitor and the tuner ---------------------------------------------------

    def _events(self, deployment: Deployment, seen: _Seen) -> None:
        rows = [dict(row) for row in reversed(self.history.events(deployment.unit, 50)) if row["id"] > seen.event]
        for row in rows:
            seen.event = max(seen.event, int(row["id"]))
            kind, detail = str(row["kind"]), str(row["detail"])
            if self.publish is not None:
                self.publish("history-event", unit=deployment.unit, id=row["id"], event=kind)
            notice = self._event_notice(deployment, kind, detail)
            if notice is not None:
                self._tell(notice)

    def _event_notice(self, deployment: Deployment, kind: str, detail: str) -> Notice | None:
        unit, flag = deployment.unit, self._unit_flag(deployment)
        if kind in ("daemon-restart", "daemon-restart-failed"):
            return Notice("monitor-restart", unit, "the health monitor restarted the server", detail,
                          f"nothing to undo (the unit is unchanged); if it keeps failing: specd rollback{flag}",
                          severity="failure" if kind.endswith("failed") else "warning")
        if kind == "daemon-rollback":
            rolled_back_from = self._rolled_back_from(unit)
            undo = (f"specd switch {rolled_back_from}{flag}" if rolled_back_from
                    else f"specd history{flag}, then specd rollback --to GEN{flag}")
            return Notice("monitor-rollback", unit, "the health monitor rolled back a switch", detail, undo)
        if kind == "daemon-rollback-failed":
            return Notice("monitor-rollback", unit, "the health monitor could not roll back", detail,
                          f"specd status{flag}", severity="failure")
        if kind == "monitor-failed":
            return Notice("monitor-restart", unit, "the health monitor gave up", detail,
                          f"specd switch PROFILE{flag} (or systemctl start {unit}) once fixed", severity="failure")
        if kind == "tune":
            return self._tune_notice(deployment, detail)
        if kind == "tune-failed":
            return Notice("bench-failed", unit, "the nightly bench failed", f"the tuner could not finish: {detail}",
                          f"nothing to undo (the box stays on its profile); reproduce: specd tune --dry-run{flag}",
                          severity="failure")
        return None

    def _rolled_back_from(self, unit: str) -> str | None:
        for generation in self.history.list(unit, 10):
            if generation.kind == "rollback" and generation.trigger == "daemon" and generation.outcome == "ok":
                return self._profile_of(generation.previous_id)
        return None

    def _tune_notice(self, deployment: Deployment, detail: str) -> Notice | None:
        sentence, numbers = split_numbers(detail)
        if not numbers or not numbers.get("switched"):
            return None
        before = numbers.get("active")
        flag = self._unit_flag(deployment)
        undo = (f"specd switch {before}{flag} && specd pin {before}{flag}" if before
                else f"specd rollback{flag} && specd pin PROFILE{flag}")
        return Notice("tuner-switch", deployment.unit, f"the tuner switched to {numbers.get('best')}", sentence, undo,
                      severity="info")

    # ---- health lost for longer than N minutes ------------------------------------------------------

    def _health(self, deployment: Deployment, seen: _Seen, state: MonitorState) -> None:
        if state.last is None or state.last.ok or state.stopped_by_owner:
            seen.unhealthy_since, seen.health_noticed = None, False
            return
        now = self._clock()
        if seen.unhealthy_since is None:
            seen.unhealthy_since = now
        lost_s = now - seen.unhealthy_since
        if seen.health_noticed or lost_s < self.health_lost_s:
            return
        seen.health_noticed = True
        flag = self._unit_flag(deployment)
        self._tell(Notice("health-lost", deployment.unit, f"{deployment.unit} unhealthy for {lost_s / 60:.0f} min",
                          f"the endpoint has failed its health checks for {lost_s / 60:.1f} minutes: "
                          f"{state.last.detail}", f"specd status{flag}; specd rollback{flag} (to the profile before)",
                          severity="failure"))
