"""The proxy's re-send rule (specd.proxy.resend): what is sent again and what the client is told.

The rule is what keeps a poison request from becoming a crash loop and a restart from becoming
client errors, so every outcome is pinned here, and a property checks the bound the docs give
(README, resend.py): a request the backend accepted and dropped reaches it at most
`MAX_DELIVERIES` times, once when it went out on a fresh connection. tests/unit/test_proxy_poison.py
checks the same rule end to end against a server that drops requests.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specd.proxy.resend import MAX_DELIVERIES, Outcome, Resends, decide

OUTCOMES: list[Outcome] = ["never-reached", "loading", "dropped", "timed-out", "failed"]


@pytest.mark.parametrize("outcome", ["never-reached", "loading"])
def test_a_request_that_never_reached_the_server_is_sent_again_after_the_gate_closes(outcome: Outcome) -> None:
    for dropped_before in (False, True):
        verdict = decide(outcome, dropped_before=dropped_before)
        assert verdict.resend and verdict.mark_unhealthy and verdict.status is None


def test_a_first_drop_on_a_reused_connection_is_sent_again_on_a_fresh_one_only_while_health_answers() -> None:
    stale = decide("dropped", reused=True, answers_health_now=True)
    assert stale.resend and stale.fresh_connection and not stale.mark_unhealthy
    crashed = decide("dropped", reused=True, answers_health_now=False)
    assert not crashed.resend and crashed.mark_unhealthy and crashed.status == 502
    assert "may have crashed on it" in crashed.reason and "not re-sent" in crashed.reason


def test_a_drop_on_a_fresh_connection_is_never_sent_again_even_while_health_answers() -> None:
    verdict = decide("dropped", reused=False, answers_health_now=True)
    assert not verdict.resend and verdict.status == 502 and verdict.mark_unhealthy


def test_a_second_drop_is_never_sent_again_whatever_health_says() -> None:
    verdict = decide("dropped", reused=True, dropped_before=True, answers_health_now=True)
    assert not verdict.resend and verdict.status == 502 and verdict.mark_unhealthy


@pytest.mark.parametrize(("outcome", "status", "says"), [("timed-out", 504, "did not answer in time"),
                                                          ("failed", 502, "answer was not HTTP")])
def test_a_silent_or_broken_answer_is_an_error_at_once_and_leaves_the_gate_open(outcome: Outcome, status: int,
                                                                                says: str) -> None:
    verdict = decide(outcome, reused=True, answers_health_now=True)
    assert (verdict.resend, verdict.mark_unhealthy, verdict.status) == (False, False, status)
    assert says in verdict.reason  # what the client and the traffic row are told


def test_a_requests_rule_remembers_its_drop_even_if_the_next_attempt_reuses_a_connection() -> None:
    """The rule holds on its own: were the proxy to send the re-send on a pooled connection again,
    a second drop is still answered 502, and drops before it count, whatever came between."""
    rule = Resends()
    first = rule.after("dropped", reused=True, answers_health_now=True)
    assert first.resend and first.fresh_connection
    assert rule.after("loading").resend  # a 503 between: sent again, and the drop is not forgotten
    second = rule.after("dropped", reused=True, answers_health_now=True)
    assert not second.resend and second.status == 502
    assert rule.dropped == 2
    fresh_rule = Resends()
    assert not fresh_rule.after("never-reached").fresh_connection and fresh_rule.dropped == 0


@given(st.lists(st.tuples(st.sampled_from(OUTCOMES), st.booleans(), st.booleans()), min_size=1, max_size=30))
def test_a_dropped_request_reaches_the_backend_at_most_as_often_as_the_docs_say(
        attempts: list[tuple[Outcome, bool, bool]]) -> None:
    """Whatever the attempts come to, the backend takes a request that it then drops at most
    MAX_DELIVERIES times, and once when the drop was on a fresh connection; the proxy follows the
    verdict's `fresh_connection` (an attempt after it is not on a reused connection)."""
    rule = Resends()
    deliveries = 0
    must_be_fresh = False
    for outcome, reused, health in attempts:
        reused = reused and not must_be_fresh
        deliveries += outcome == "dropped"
        verdict = rule.after(outcome, reused=reused, answers_health_now=health)
        if outcome == "dropped" and not reused:
            assert not verdict.resend
        if not verdict.resend:
            break
        must_be_fresh = must_be_fresh or verdict.fresh_connection
    assert deliveries <= MAX_DELIVERIES
