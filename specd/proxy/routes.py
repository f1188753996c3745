"""The proxy's side of routing: which server each request goes to, on the request path.

With routing on (specd.routing.state), the deployment's serving slot (the *primary*: what switch,
rollback and the tuner move) has companion servers beside it, each running another profile. For
each chat or completion request the proxy reads the body once, judges its task class
(specd.traffic.taskclass, on clipped text), and asks specd.routing.choose for a server given the
routing table, the requests it has in flight to each server, which servers are up, and where the
conversation's prefix is cached (specd.routing.affinity). In per-request mode there is one server
and the proxy stamps the class's draft settings on the body instead (specd.routing.stamp).

A companion that refuses a connection, answers 503 or drops a request is marked down and the
request goes to the primary (the re-send rule decides whether this one is re-sent, as for the
primary); a poller puts it back once its /health answers. Everything else — the gate, holding
requests while the primary restarts, the crash watch — stays the primary's: a companion is never
held for, and while the primary is held for a restart its classes go to a companion that is up.
The route set is re-read when `specd route on/off` or the night's table change it (`refresh`),
and `wait_idle` tells `route off` when nothing is in flight to the companions it removed.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from specd.proxy.http1.bodies import Body
from specd.proxy.http1.client import answers_health_now
from specd.routing.affinity import DEFAULT_TTL_S, Affinity
from specd.routing.choose import DEFAULT_BUSY_AT, Reason, Server, choose
from specd.routing.stamp import Stamp, stamped_bytes
from specd.routing.table import RoutingTable
from specd.traffic.shape import conversation_of
from specd.traffic.taskclass import TaskClass, classify

ROUTED_ENDPOINTS = (b"/v1/chat/completions", b"/chat/completions", b"/v1/completions", b"/completions")


@dataclass(frozen=True)
class Companion:
    """A companion server as the proxy sends to it."""

    url: str
    profile: str
    api_key: str | None = None


@dataclass(frozen=True)
class RouteSet:
    """What the proxy routes over now (read from the routing state by the daemon)."""

    on: bool = False
    companions: tuple[Companion, ...] = ()
    table: RoutingTable = field(default_factory=RoutingTable)
    stamps: Mapping[TaskClass, Stamp] = field(default_factory=dict)
    busy_at: int = DEFAULT_BUSY_AT
    sticky_s: float = DEFAULT_TTL_S

    @property
    def active(self) -> bool:
        return self.on and bool(self.companions or self.stamps)


@dataclass(frozen=True)
class Routed:
    """Where one request goes and what is sent: `url` None is the primary (its gate and re-send rule)."""

    url: str | None
    profile: str | None
    body: Body
    task_class: TaskClass | None = None
    reason: Reason | None = None


def messages_of(document: Mapping[str, Any]) -> list[Any] | None:
    """A chat body's messages, or a completion's prompt as one user message."""
    messages = document.get("messages")
    if isinstance(messages, list):
        return messages
    prompt = document.get("prompt")
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else None


class Router:
    def __init__(self, resolve: Callable[[], RouteSet], *,
                 healthy: Callable[[str], Awaitable[bool]] = answers_health_now, poll_s: float = 0.5,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._resolve = resolve
        self._healthy = healthy
        self._poll_s = poll_s
        self._clock = clock
        self.routes = resolve()
        self.affinity = Affinity(self.routes.sticky_s)
        self.in_flight: defaultdict[str, int] = defaultdict(int)  # by companion URL (the primary's: Proxy.active)
        self.down: set[str] = set()
        self.counts: defaultdict[str, int] = defaultdict(int)  # requests routed, by "profile reason"
        self._pollers: dict[str, asyncio.Task[None]] = {}

    @property
    def active(self) -> bool:
        return self.routes.active

    def pick(self, target: bytes, document: Mapping[str, Any] | None, body: Body, primary_url: str,
             primary_profile: str | None, primary_open: bool, primary_in_flight: int) -> Routed:
        """The route of one request (the primary unless routing applies to it)."""
        routes = self.routes
        path = target.split(b"?", 1)[0]
        messages = messages_of(document) if document is not None and path in ROUTED_ENDPOINTS else None
        if messages is None:
            return Routed(None, primary_profile, body)
        assert document is not None
        task_class = classify(messages)  # bounded: it reads the start of the last user turn
        if routes.stamps:
            fields = routes.stamps.get(task_class)
            stamped = stamped_bytes(document, fields) if fields else None
            return Routed(None, primary_profile, stamped if stamped is not None else body, task_class, "route")
        conversation, turn = conversation_of(messages)
        now = self._clock()
        servers = [Server(primary_url, primary_profile, primary_in_flight, primary_open, primary=True)]
        servers += [Server(c.url, c.profile, self.in_flight[c.url], c.url not in self.down) for c in routes.companions]
        cached = self.affinity.server_of(conversation, now) if turn > 1 else None
        choice = choose(task_class, servers, routes.table, conversation_on=cached, busy_at=routes.busy_at)
        self.affinity.note(conversation, choice.server.key, now)
        self.counts[f"{choice.server.profile} {choice.reason}"] += 1
        url = None if choice.server.primary else choice.server.key
        return Routed(url, choice.server.profile, body, task_class, choice.reason)

    def companion(self, url: str) -> Companion | None:
        return next((c for c in self.routes.companions if c.url == url), None)

    def begin(self, url: str) -> None:
        self.in_flight[url] += 1

    def end(self, url: str) -> None:
        self.in_flight[url] -= 1
        if self.in_flight[url] <= 0:
            del self.in_flight[url]

    def mark_down(self, url: str) -> None:
        """A companion failed a request: no new ones until its /health answers again."""
        self.down.add(url)
        self.affinity.forget_server(url)
        poller = self._pollers.get(url)
        if poller is None or poller.done():
            self._pollers[url] = asyncio.get_running_loop().create_task(self._poll(url))

    async def _poll(self, url: str) -> None:
        while url in self.down:
            if self.companion(url) is None:  # it left the set meanwhile
                self.down.discard(url)
                return
            if await self._healthy(url):
                self.down.discard(url)
                return
            await asyncio.sleep(self._poll_s)

    async def refresh(self) -> RouteSet:
        """Re-read the route set (off the loop); servers that left it are forgotten."""
        routes = await asyncio.to_thread(self._resolve)
        kept = {c.url for c in routes.companions}
        for url in [u for u in self.down if u not in kept]:
            self.down.discard(url)
        for old in self.routes.companions:
            if old.url not in kept:
                self.affinity.forget_server(old.url)
        self.affinity.ttl_s = routes.sticky_s
        self.routes = routes
        return routes

    async def wait_idle(self, urls: Iterable[str], timeout_s: float) -> bool:
        """Until nothing is in flight to `urls` (True), or `timeout_s` passed (False)."""
        wanted = list(urls)
        deadline = self._clock() + timeout_s
        while any(self.in_flight.get(url, 0) for url in wanted):
            if self._clock() > deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    def stop(self) -> None:
        for poller in self._pollers.values():
            poller.cancel()

    def status(self) -> dict[str, Any]:
        routes = self.routes
        return {"on": routes.on, "mode": "per-request" if routes.stamps else "servers",
                "companions": [{"url": c.url, "profile": c.profile, "up": c.url not in self.down,
                                "in_flight": self.in_flight.get(c.url, 0)} for c in routes.companions],
                "routed": dict(self.counts), "conversations": len(self.affinity)}
