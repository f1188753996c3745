"""Notifications through the real apprise library to local HTTP receivers: each message says what,
where and how to undo; the rate limit holds repeats back and counts them; a hung or failing
service never blocks the caller and does not stop the next message."""

from __future__ import annotations

import threading

import pytest

from specd.daemon.notifications import Notice, Notifier, RateLimit, apprise_sender
from specd.errors import ConfigError
from specd.profiles.config import NotifyConfig
from tests.fakes.proxy_fakes import eventually
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


def test_notify_returns_while_a_send_is_still_in_progress() -> None:
    """The caller (the daemon's loop, a switch) never waits for a send: with the sender held inside
    its first send, every notify() call returns, and none of the sends has finished yet."""
    entered, release = threading.Event(), threading.Event()

    def held_sender_fake(title: str, body: str, kind: str) -> bool:
        entered.set()
        release.wait(20)
        return True

    notifier = Notifier(NotifyConfig(urls=(), min_interval_s=0, timeout_s=120), sender=held_sender_fake)
    try:
        assert notifier.notify(notice("auto-revert"))
        assert entered.wait(30), "the worker never started the send"
        for kind in ("health-lost", "bench-failed"):
            assert notifier.notify(notice(kind))
        assert notifier.sent == []  # the calls above returned with the first send still held
    finally:
        release.set()
    eventually(lambda: len(notifier.sent) == 3, "the three sends once released")
    notifier.close()


def test_a_hung_service_does_not_stop_the_next_message() -> None:
    with receiver("hang") as hung, receiver() as inbox:
        notifier = Notifier(NotifyConfig(urls=(f"json://{hung.url}/",), min_interval_s=0, timeout_s=1))
        good = Notifier(NotifyConfig(urls=(f"json://{inbox.url}/",), min_interval_s=0, timeout_s=1))
        try:
            for kind in ("auto-revert", "health-lost", "bench-failed"):
                assert notifier.notify(notice(kind))
            eventually(lambda: notifier.failed == 3, "the hung sends to be abandoned", 60)
            assert notifier.sent == [] and hung.connections >= 1
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
            eventually(lambda: notifier.failed == 1, "the failed send to be counted", 60)
            assert broken.connections >= 1
        finally:
            notifier.close()


def test_an_url_apprise_cannot_read_is_a_config_error_naming_it() -> None:
    with pytest.raises(ConfigError, match="nonsense://x"):
        apprise_sender(("nonsense://x",), 5.0)
