"""Notifications through the real apprise library to local HTTP receivers: each message says what,
where and how to undo; the rate limit holds repeats back and counts them; a hung or failing
service never blocks the caller and does not stop the next message."""

from __future__ import annotations

import time

import pytest

from specd.daemon.notifications import Notice, Notifier, RateLimit, apprise_sender
from specd.errors import ConfigError
from specd.profiles.config import NotifyConfig
from tests.receivers import receiver


def notice(kind: str = "auto-revert", what: str = "switch to mtp failed: exited while loading") -> Notice:
    return Notice(kind, "llama-server.service", "switch to mtp reverted", what,  # type: ignore[arg-type]
                  "nothing to undo: the box is back on plain", host="box1", severity="failure")


def test_a_message_says_what_where_and_how_to_undo_it() -> None:
    message = notice()
    assert message.title == "specd on box1: switch to mtp reverted"
    body = message.body(held_back=2)
    for part in ("switch to mtp failed: exited while loading", "box: box1", "unit: llama-server.service",
                 "undo: nothing to undo: the box is back on plain", "2 earlier messages of this kind held back"):
        assert part in body


def test_the_rate_limit_holds_repeats_back_per_kind_and_unit_and_counts_them() -> None:
    now = [0.0]
    limit = RateLimit(300.0, clock=lambda: now[0])
    assert limit.allow("auto-revert", "a.service") == 0
    assert limit.allow("auto-revert", "a.service") is None
    assert limit.allow("auto-revert", "b.service") == 0  # another unit is other news
    assert limit.allow("health-lost", "a.service") == 0  # another kind too
    now[0] = 301.0
    assert limit.allow("auto-revert", "a.service") == 1


def test_apprise_delivers_to_a_json_webhook() -> None:
    with receiver() as inbox:
        notifier = Notifier(NotifyConfig(urls=(f"json://{inbox.url}/hook",), min_interval_s=0, timeout_s=5))
        try:
            assert notifier.notify(notice())
            received = inbox.wait_for("the message", lambda r: r)
        finally:
            notifier.close()
    assert received[0]["title"] == "specd on box1: switch to mtp reverted"
    assert "undo: nothing to undo" in received[0]["message"] and received[0]["type"] == "failure"


def test_a_hung_service_neither_blocks_the_caller_nor_stops_the_next_message() -> None:
    with receiver("hang") as hung, receiver() as inbox:
        notifier = Notifier(NotifyConfig(urls=(f"json://{hung.url}/",), min_interval_s=0, timeout_s=1))
        good = Notifier(NotifyConfig(urls=(f"json://{inbox.url}/",), min_interval_s=0, timeout_s=1))
        try:
            started = time.monotonic()
            for kind in ("auto-revert", "health-lost", "bench-failed"):
                assert notifier.notify(notice(kind))
            assert time.monotonic() - started < 0.5  # queued, not sent in the caller's thread
            hung_deadline = time.monotonic() + 30
            while notifier.failed < 3 and time.monotonic() < hung_deadline:
                time.sleep(0.1)
            assert notifier.failed == 3 and notifier.sent == [] and hung.connections >= 1
            good.notify(notice("tuner-switch"))
            inbox.wait_for("a message past the hung one", lambda r: r)
        finally:
            notifier.close()
            good.close()


def test_a_failing_service_is_counted_and_the_caller_goes_on() -> None:
    with receiver("fail") as broken:
        notifier = Notifier(NotifyConfig(urls=(f"json://{broken.url}/",), min_interval_s=0, timeout_s=5))
        try:
            assert notifier.notify(notice())
            deadline = time.monotonic() + 30
            while notifier.failed < 1 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert notifier.failed == 1 and broken.connections >= 1
        finally:
            notifier.close()


def test_an_url_apprise_cannot_read_is_a_config_error_naming_it() -> None:
    with pytest.raises(ConfigError, match="nonsense://x"):
        apprise_sender(("nonsense://x",), 5.0)
