"""The proxy's re-send rule: after one attempt to reach the backend, send again or answer an error.

A request is re-sent only when it provably never reached the server: a refused connection, or a
503 while the server loads. A connection the backend accepted and then dropped before a status
line may mean the server crashed *on this request* (a GGML_ASSERT on some input): it is re-sent at
most once, and only when the backend still answers /health at once (a stale keep-alive connection
after a restart); otherwise the client gets a 502 right away, so one poison request costs one
server restart, not a crash loop. A backend that goes silent is a 504; nothing else is re-sent.
Once response bytes flowed to the client nothing is re-sent (the relay never comes back here).

Pure: the proxy classifies what happened (specd.proxy.http1.response) and asks `decide`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MAX_STALE_RESENDS = 8
"""Drops on a server that still answers /health at once are stale pooled connections (the server
restarted since they were opened): the pool may hold several, each found dead on use, so a request
may meet more than one. Past this many it is answered 502 like any other drop."""

Outcome = Literal["never-reached", "loading", "dropped", "timed-out", "failed"]
"""never-reached: refused or not connected in time; loading: the backend's own 503; dropped: the
connection was accepted, then closed before a status line; timed-out: no answer within the read
timeout; failed: anything else (an answer that is not HTTP, a request the client library refuses)."""


@dataclass(frozen=True)
class Verdict:
    resend: bool
    mark_unhealthy: bool  # close the gate until /health answers again
    status: int | None = None  # the error the client gets when not re-sent
    reason: str = ""


def needs_probe(outcome: Outcome, *, dropped_before: bool) -> bool:
    """Whether `decide` needs to know if the backend answers /health right now."""
    return outcome == "dropped" and not dropped_before


def decide(outcome: Outcome, *, dropped_before: bool, answers_health_now: bool = False) -> Verdict:
    if outcome in ("never-reached", "loading"):
        return Verdict(resend=True, mark_unhealthy=True)
    if outcome == "dropped":
        if not dropped_before and answers_health_now:  # a stale keep-alive connection to a live server
            return Verdict(resend=True, mark_unhealthy=False)
        return Verdict(resend=False, mark_unhealthy=True, status=502,
                       reason="the backend dropped the connection after accepting the request; "
                              "it may have crashed on it: not re-sent")
    if outcome == "timed-out":
        return Verdict(resend=False, mark_unhealthy=False, status=504, reason="the backend did not answer in time")
    return Verdict(resend=False, mark_unhealthy=False, status=502, reason="the backend's answer was not HTTP")
