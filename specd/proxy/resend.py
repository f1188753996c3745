"""The proxy's re-send rule, whole: after each attempt to reach the backend, send again or answer.

- A request that provably never reached the server is sent again, as often as the hold timeout
  allows: a refused connection or none in time (`never-reached`), or the server's own 503 while
  it loads (`loading`). The gate closes until /health answers, so these re-sends wait there.
- A request the server accepted and then dropped before a status line (`dropped`) may have
  crashed it (a GGML_ASSERT on some input), so it is answered 502 at once and not re-sent — with
  one exception: the first drop of a request that went out on a *reused* keep-alive connection,
  while the server still answers /health at once. That connection may have been closed by the
  server just as it was reused (the race every HTTP client's retry on a pooled connection
  covers), so the request is sent once more, on a *fresh* connection, and the pool's other idle
  connections to that server are closed too. A drop on a fresh connection is never re-sent.
  So a request the backend took and dropped reaches it at most `MAX_DELIVERIES` times (twice),
  and exactly once when it went out on a fresh connection; a poison request costs at most one
  server restart, never a crash loop.
- A backend that goes silent is a 504 and a broken answer a 502; neither is re-sent.
- Once response bytes flowed to the client nothing is re-sent (the relay never comes back here).

Pure: the proxy classifies what happened (specd.proxy.http1.response), asks a request's
`Resends` after each attempt and does what the `Verdict` says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MAX_DELIVERIES = 2
"""The most times a request the backend accepted (a `dropped` outcome) reaches it."""

Outcome = Literal["never-reached", "loading", "dropped", "timed-out", "failed"]
"""never-reached: refused or not connected in time; loading: the backend's own 503; dropped: the
connection was accepted, then closed before a status line; timed-out: no answer within the read
timeout; failed: anything else (an answer that is not HTTP, a request the client library refuses)."""

NOT_RESENT = ("the backend dropped the connection after accepting the request; it may have crashed on it: "
              "not re-sent")


@dataclass(frozen=True)
class Verdict:
    resend: bool
    mark_unhealthy: bool  # close the gate until /health answers again
    status: int | None = None  # the error the client gets when not re-sent
    reason: str = ""
    fresh_connection: bool = False  # the re-send goes on a new connection; the pool's idle ones are closed


def decide(outcome: Outcome, *, reused: bool = False, dropped_before: bool = False,
           answers_health_now: bool = False) -> Verdict:
    """What to do after one attempt. `reused`: the attempt went out on a keep-alive connection that
    had served an earlier request; `dropped_before`: an earlier attempt of this request was dropped;
    `answers_health_now`: (after a drop) the server answered /health right away."""
    if outcome in ("never-reached", "loading"):
        return Verdict(resend=True, mark_unhealthy=True)
    if outcome == "dropped":
        if reused and not dropped_before and answers_health_now:  # perhaps a connection closed as it was reused
            return Verdict(resend=True, mark_unhealthy=False, fresh_connection=True)
        return Verdict(resend=False, mark_unhealthy=True, status=502, reason=NOT_RESENT)
    if outcome == "timed-out":
        return Verdict(resend=False, mark_unhealthy=False, status=504, reason="the backend did not answer in time")
    return Verdict(resend=False, mark_unhealthy=False, status=502, reason="the backend's answer was not HTTP")


class Resends:
    """One request's attempts as the rule needs to know them; `after` each attempt gives the verdict."""

    def __init__(self) -> None:
        self.dropped = 0  # attempts the backend accepted and dropped

    @property
    def dropped_before(self) -> bool:
        return self.dropped > 0

    def after(self, outcome: Outcome, *, reused: bool = False, answers_health_now: bool = False) -> Verdict:
        verdict = decide(outcome, reused=reused, dropped_before=self.dropped_before,
                         answers_health_now=answers_health_now)
        if outcome == "dropped":
            self.dropped += 1
        return verdict
