"""Notifications to the owner's phone or inbox: `[notify] urls`, sent through apprise (ntfy,
Gotify, Matrix, Discord, e-mail, plain JSON/form webhooks and ~100 more).

Each message says what happened, on which box, and the command that undoes it (or why there is
nothing to undo). `Notifier.notify` never blocks and never raises: messages go to a queue that one
worker thread sends, each send bounded by `timeout_s` (a hung service is abandoned, the next
message goes on), so a dead or slow notifier cannot hold up a switch, the health monitor or the
event loop. Each kind of message per unit is rate-limited to one per `min_interval_s`; what the
limit held back is counted in the next message of that kind.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from specd.errors import ConfigError
from specd.profiles.config import NotifyConfig

log = logging.getLogger(__name__)

# monitor-restart covers the monitor's restarts, the failed ones and its giving up; monitor-rollback
# its rollbacks, done or failed.
NoticeKind = Literal["auto-revert", "monitor-restart", "monitor-rollback", "tuner-switch", "bench-failed",
                     "health-lost"]
NOTICE_KINDS: tuple[NoticeKind, ...] = ("auto-revert", "monitor-restart", "monitor-rollback", "tuner-switch",
                                        "bench-failed", "health-lost")
QUEUE_MAX = 100
Sender = Callable[[str, str, str], bool]  # (title, body, apprise notify type) -> delivered


@dataclass(frozen=True)
class Notice:
    kind: NoticeKind
    unit: str
    headline: str
    what: str
    undo: str
    host: str = field(default_factory=socket.gethostname)
    severity: Literal["info", "warning", "failure"] = "warning"

    @property
    def title(self) -> str:
        return f"specd on {self.host}: {self.headline}"

    def body(self, held_back: int = 0) -> str:
        lines = [self.what, "", f"box: {self.host}", f"unit: {self.unit}", f"undo: {self.undo}", f"event: {self.kind}"]
        if held_back:
            lines.append(f"({held_back} earlier message{'s' if held_back > 1 else ''} of this kind held back "
                         "by the rate limit)")
        return "\n".join(lines)


class RateLimit:
    """At most one message per (kind, unit) per `min_interval_s`; counts what it held back."""

    def __init__(self, min_interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.min_interval_s = min_interval_s
        self._clock = clock
        self._last: dict[tuple[str, str], float] = {}
        self.held_back: dict[tuple[str, str], int] = {}

    def allow(self, kind: str, unit: str) -> int | None:
        """None when held back; else how many were held back since the last one sent."""
        key, now = (kind, unit), self._clock()
        last = self._last.get(key)
        if last is not None and now - last < self.min_interval_s:
            self.held_back[key] = self.held_back.get(key, 0) + 1
            return None
        self._last[key] = now
        return self.held_back.pop(key, 0)


def apprise_sender(urls: tuple[str, ...], timeout_s: float) -> Sender:
    """An apprise object for these URLs; ConfigError naming any URL apprise cannot parse."""
    import apprise

    notifier = apprise.Apprise()
    for url in urls:
        if not notifier.add(url):
            raise ConfigError(f"[notify] urls: apprise does not understand {url!r}",
                              hint="see apprise's URL list (ntfy://, gotify://, matrix://, discord://, mailto://, "
                                   "json://host/path, form://host/path)")

    def send(title: str, body: str, kind: str) -> bool:
        notify_type = {"info": apprise.NotifyType.INFO, "warning": apprise.NotifyType.WARNING,
                       "failure": apprise.NotifyType.FAILURE}[kind]
        return bool(notifier.notify(body=body, title=title, notify_type=notify_type, timeout=timeout_s))

    return send


class Notifier:
    def __init__(self, settings: NotifyConfig, *, sender: Sender | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self._send = sender or apprise_sender(settings.urls, settings.timeout_s)
        self.limit = RateLimit(settings.min_interval_s, clock)
        self._queue: queue.Queue[tuple[Notice, int] | None] = queue.Queue(QUEUE_MAX)
        self.sent: list[Notice] = []
        self.failed = 0
        self._thread = threading.Thread(target=self._run, name="specd-notify", daemon=True)
        self._thread.start()

    def notify(self, notice: Notice) -> bool:
        """Queue `notice` unless the rate limit holds it back; never blocks, never raises."""
        held_back = self.limit.allow(notice.kind, notice.unit)
        if held_back is None:
            log.info("notification held back by the rate limit: %s", notice.headline)
            return False
        try:
            self._queue.put_nowait((notice, held_back))
        except queue.Full:
            log.warning("notification queue full; dropped: %s", notice.headline)
            return False
        return True

    def close(self, timeout_s: float = 5.0) -> None:
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            pass
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            notice, held_back = item
            if self._send_bounded(notice, held_back):
                self.sent.append(notice)
            else:
                self.failed += 1

    def _send_bounded(self, notice: Notice, held_back: int) -> bool:
        """Send in a throwaway thread and wait at most timeout_s (+ a little): a hung service is left
        behind, daemonic, and the queue moves on."""
        outcome: list[bool] = []

        def attempt() -> None:
            try:
                outcome.append(self._send(notice.title, notice.body(held_back), notice.severity))
            except Exception:  # apprise plugins raise what they raise
                log.exception("notification %r failed", notice.headline)
                outcome.append(False)

        sender = threading.Thread(target=attempt, name="specd-notify-send", daemon=True)
        sender.start()
        sender.join(self.settings.timeout_s + 2.0)
        if sender.is_alive():
            log.warning("notification %r: no answer within %.0f s; abandoned", notice.headline,
                        self.settings.timeout_s)
            return False
        if not outcome or not outcome[0]:
            log.warning("notification %r was not delivered (see apprise's log above)", notice.headline)
            return False
        return True
