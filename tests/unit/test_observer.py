"""The history observer: what changed since the last look becomes a page event and, where the
owner should hear of it, a notification — whoever wrote the history (CLI, page, monitor, tuner).
A real History in a tmp state dir; the notifier's sender records instead of sending."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specd.daemon.monitor import MonitorState
from specd.daemon.notifications import Notifier
from specd.daemon.observer import HistoryObserver
from specd.deploy.health import HealthResult
from specd.deploy.history import History
from specd.profiles.config import Deployment, NotifyConfig

UNIT = "llama-observed.service"


class Recorded:
    def __init__(self) -> None:
        self.messages: list[tuple[str, str]] = []

    def __call__(self, title: str, body: str, kind: str) -> bool:
        self.messages.append((title, body))
        return True


@pytest.fixture
def history(tmp_path: Path) -> History:
    return History(tmp_path / "state" / "specd.db")


def observer_with(history: History, clock: list[float] | None = None) -> tuple[
        HistoryObserver, Recorded, Notifier, list[tuple[str, dict[str, Any]]]]:
    sent = Recorded()
    notifier = Notifier(NotifyConfig(urls=("json://unused",), min_interval_s=0, timeout_s=5), sender=sent)
    published: list[tuple[str, dict[str, Any]]] = []
    now = clock or [0.0]
    observer = HistoryObserver([Deployment(UNIT, "user", Path("/profiles"))], history=history, notifier=notifier,
                               publish=lambda name, **data: published.append((name, data)), health_lost_s=60,
                               clock=lambda: now[0])
    return observer, sent, notifier, published


def bodies(sent: Recorded, notifier: Notifier) -> list[str]:
    notifier.close()
    return [f"{title}\n{body}" for title, body in sent.messages]


def test_only_what_happens_after_the_start_is_news(history: History) -> None:
    history.add(UNIT, kind="switch", profile="plain", unit_sha256=None, backup_path=None, previous_id=None,
                trigger="cli", outcome="reverted")
    observer, sent, notifier, published = observer_with(history)
    observer.poll()
    assert published == [] and bodies(sent, notifier) == []


def test_a_reverted_switch_is_an_auto_revert_with_the_journal_and_a_retry_command(history: History) -> None:
    first = history.add(UNIT, kind="switch", profile="plain", unit_sha256=None, backup_path=None, previous_id=None,
                        trigger="cli", outcome="ok")
    observer, sent, notifier, published = observer_with(history)
    broken = history.add(UNIT, kind="switch", profile="mtp", unit_sha256=None, backup_path=None, previous_id=first,
                         trigger="web")
    observer.poll()  # pending: the page hears of it, nobody is notified yet
    assert published[0][0] == "generation" and published[0][1]["outcome"] == "pending"
    history.event(UNIT, "revert-journal", f"generation {broken}\nerror: failed to load model\nexiting")
    history.finish(broken, outcome="reverted", detail="llama-server exited while loading")
    observer.poll()
    [message] = bodies(sent, notifier)
    assert "switch to mtp reverted" in message and "llama-server exited while loading" in message
    assert "--- journal ---\nerror: failed to load model\nexiting" in message
    assert "undo: nothing to undo: the box is back on plain. Retry after fixing: specd switch mtp" in message
    assert "event: auto-revert" in message


def test_a_tuner_switch_says_how_to_go_back_and_stay(history: History) -> None:
    observer, sent, notifier, _ = observer_with(history)
    numbers = {"best": "mtp", "active": "plain", "switched": True, "estimates": {}}
    history.event(UNIT, "tune", f"switched to mtp: 20% faster than plain | {json.dumps(numbers)}")
    kept = {**numbers, "switched": False}
    history.event(UNIT, "tune", f"kept plain: mtp 2% faster, below the 5% margin | {json.dumps(kept)}")
    observer.poll()
    [message] = bodies(sent, notifier)
    assert "the tuner switched to mtp" in message and "undo: specd switch plain && specd pin plain" in message


def test_health_lost_is_told_once_after_the_threshold_and_again_after_a_recovery(history: History) -> None:
    clock = [0.0]
    observer, sent, notifier, _ = observer_with(history, clock)
    down = MonitorState(failures=3, last=HealthResult(False, "/health answered 503"))
    for moment in (0.0, 30.0, 61.0, 120.0):
        clock[0] = moment
        observer.poll({UNIT: down})
    observer.poll({UNIT: MonitorState(last=HealthResult(True, "healthy"))})
    for moment in (200.0, 261.0):
        clock[0] = moment
        observer.poll({UNIT: down})
    messages = bodies(sent, notifier)
    assert len(messages) == 2 and all("/health answered 503" in m and "event: health-lost" in m for m in messages)
