"""The proxy's re-send rule (specd.proxy.resend): what is sent again and what the client is told.

The rule is what keeps a poison request from becoming a crash loop and a restart from becoming
client errors, so every outcome is pinned here; tests/unit/test_proxy_poison.py checks the same
rule end to end against a server that crashes.
"""

from __future__ import annotations

import pytest

from specd.proxy.resend import Outcome, decide, needs_probe


@pytest.mark.parametrize("outcome", ["never-reached", "loading"])
def test_a_request_that_never_reached_the_server_is_sent_again_after_the_gate_closes(outcome: Outcome) -> None:
    for dropped_before in (False, True):
        verdict = decide(outcome, dropped_before=dropped_before)
        assert verdict.resend and verdict.mark_unhealthy and verdict.status is None
        assert not needs_probe(outcome, dropped_before=dropped_before)


def test_a_first_drop_is_sent_again_only_when_the_server_still_answers_health() -> None:
    assert needs_probe("dropped", dropped_before=False)
    stale = decide("dropped", dropped_before=False, answers_health_now=True)
    assert stale.resend and not stale.mark_unhealthy  # a stale keep-alive connection to a live server
    crashed = decide("dropped", dropped_before=False, answers_health_now=False)
    assert not crashed.resend and crashed.mark_unhealthy and crashed.status == 502
    assert "may have crashed on it" in crashed.reason and "not re-sent" in crashed.reason


def test_a_second_drop_is_never_sent_again_whatever_health_says() -> None:
    assert not needs_probe("dropped", dropped_before=True)
    verdict = decide("dropped", dropped_before=True, answers_health_now=True)
    assert not verdict.resend and verdict.status == 502 and verdict.mark_unhealthy


@pytest.mark.parametrize(("outcome", "status"), [("timed-out", 504), ("failed", 502)])
def test_a_silent_or_broken_answer_is_an_error_at_once_and_leaves_the_gate_open(outcome: Outcome, status: int) -> None:
    verdict = decide(outcome, dropped_before=False, answers_health_now=True)
    assert (verdict.resend, verdict.mark_unhealthy, verdict.status) == (False, False, status)
    assert not needs_probe(outcome, dropped_before=False)
