"""Which resident server answers a request: pure, so the proxy can ask it on every request.

In order: a server that is down or held for a restart is never chosen while another answers (a
failed routed server drains to the other); a conversation stays on the server that holds its
prefix in cache while that server is up (moving it would pay its whole prefill again); otherwise
the table's profile for the request's class, on the least busy server of it. An idle server of
that profile always gets it: the route is the bench's evidence for a request alone. When it is
busy, another server takes the request if it would answer sooner by the table's margin at the load
each has now — the route's paired ratio between the two profiles, times each profile's measured
slowdown at its load (a speculative server with requests in flight can lose to an idle plain one on
prose: seed 001's DFlash was 0.7x plain at batch 8); where the table has no load measurements for
them, once the routed server has `busy_at` requests in flight and the other fewer. No route for the
class: the serving profile (the primary), as without routing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from specd.routing.table import RoutingTable
from specd.traffic.taskclass import TaskClass

DEFAULT_BUSY_AT = 4  # llama-server's default parallel slots: past them, requests queue

Reason = Literal["route", "default", "load", "conversation", "only", "drained"]


@dataclass(frozen=True)
class Server:
    """A resident server as the router sees it at one moment."""

    key: str  # its base URL: the proxy's name for it
    profile: str | None
    in_flight: int  # requests the proxy has sent it and not finished
    healthy: bool  # answers and is not held for a restart
    primary: bool = False  # the deployment's serving slot (switch, rollback and the tuner move it)


@dataclass(frozen=True)
class Choice:
    server: Server
    reason: Reason


def _primary(servers: Sequence[Server]) -> Server:
    return next((s for s in servers if s.primary), servers[0])


def expected(task_class: TaskClass, server: Server, home: Server, table: RoutingTable) -> float | None:
    """A request's expected wall clock on `server` at its load now, in units of `home`'s profile alone;
    None where the table cannot say."""
    if server.profile is None or home.profile is None:
        return None
    ratio = table.ratio(task_class, server.profile, home.profile)
    slowdown = table.slowdown(task_class, server.profile, server.in_flight + 1)
    return None if ratio is None or slowdown is None else ratio * slowdown


def _sooner(task_class: TaskClass, home: Server, other: Server, table: RoutingTable, busy_at: int) -> bool:
    """Would `other` answer this request sooner than the busy `home`, at the load each has now?"""
    mine, theirs = expected(task_class, home, home, table), expected(task_class, other, home, table)
    if mine is not None and theirs is not None:
        return theirs < mine * (1.0 - table.margin)
    return home.in_flight >= busy_at and other.in_flight < home.in_flight


def choose(task_class: TaskClass, servers: Sequence[Server], table: RoutingTable, *,
           conversation_on: str | None = None, busy_at: int = DEFAULT_BUSY_AT) -> Choice:
    """The server for one request of `task_class`; `conversation_on` is the server that holds the
    request's conversation prefix, if any (specd.routing.affinity)."""
    if not servers:
        raise ValueError("no server to choose from")
    up = [s for s in servers if s.healthy]
    if not up:
        return Choice(_primary(servers), "only")  # nothing answers: the proxy's gate holds it for the primary
    if len(up) == 1:
        return Choice(up[0], "only" if len(servers) == 1 else "drained")
    if conversation_on is not None:
        kept = next((s for s in up if s.key == conversation_on), None)
        if kept is not None:
            return Choice(kept, "conversation")
    wanted = table.profile_for(task_class)
    routed = [s for s in up if wanted is not None and s.profile == wanted]
    reason: Reason = "route"
    if not routed:
        primary = _primary(servers)
        routed, reason = ([primary] if primary.healthy else up), "default"
    home = min(routed, key=lambda s: (s.in_flight, not s.primary))
    if home.in_flight == 0:
        return Choice(home, reason)
    others = [s for s in up if s.profile != home.profile and _sooner(task_class, home, s, table, busy_at)]
    if not others:
        return Choice(home, reason)

    def rank(server: Server) -> tuple[bool, float, int]:
        cost = expected(task_class, server, home, table)
        return cost is None, cost or 0.0, server.in_flight

    return Choice(min(others, key=rank), "load")
