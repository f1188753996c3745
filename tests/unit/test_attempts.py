"""Where the proxy's attempts go when routing is on (specd.proxy.attempts.Attempts over a real Router):
a conversation that began on the primary stays there, and a failed attempt moves to the primary only when
it was a companion's. Pure asyncio, no sockets. Each test answers mutants that lived through the socket
tests (benchmarks/results/mutation-proxy.md)."""

from __future__ import annotations

import asyncio
import json

from specd.proxy.attempts import Attempts
from specd.proxy.bodies import BodyReader
from specd.proxy.http1.server import ClientRequest
from specd.proxy.routes import Companion, Routed, Router, RouteSet
from specd.proxy.settings import Backend
from specd.routing.table import Route, RoutingTable

PRIMARY = Backend("http://127.0.0.1:1", "plain")
MTP = "http://127.0.0.1:2"
TABLE = RoutingTable(routes={"code": Route("mtp", "bench"), "creative": Route("plain", "bench")})
STORY = "Write a short story about a lighthouse keeper."
CODE = "Now write a python function that counts the lighthouse's flashes."


def attempts() -> Attempts:
    routes = RouteSet(True, (Companion(MTP, "mtp"),), TABLE)
    return Attempts(Router(lambda: routes), BodyReader())


def request(*turns: str) -> ClientRequest:
    messages: list[dict[str, str]] = []
    for number, text in enumerate(turns):
        if number:
            messages.append({"role": "assistant", "content": f"(answer {number})"})
        messages.append({"role": "user", "content": text})
    body = json.dumps({"model": "tiny", "messages": messages}).encode()
    return ClientRequest("POST", b"/v1/chat/completions", [(b"content-type", b"application/json")], body)


def test_a_conversation_that_began_on_the_primary_stays_there_when_its_next_turn_is_of_a_routed_class() -> None:
    routing = attempts()
    first = routing.route_now(request(STORY), PRIMARY, True)
    assert first is not None and first.url is None and first.profile == "plain"
    alone = routing.route_now(request(CODE), PRIMARY, True)  # the same ask as a new conversation: mtp's
    assert alone is not None and alone.url == MTP
    follow_up = routing.route_now(request(STORY, CODE), PRIMARY, True)
    assert follow_up is not None and (follow_up.url, follow_up.reason) == (None, "conversation")


def test_a_failed_companion_attempt_moves_to_the_primary_and_a_failed_primary_attempt_does_not() -> None:
    async def scenario() -> None:
        routing = attempts()
        router = routing.router
        assert router is not None
        on_companion = routing.route_now(request(CODE), PRIMARY, True)
        assert on_companion is not None and on_companion.url == MTP
        moved = routing.companion_failed(on_companion, "plain")
        assert moved == Routed(None, "plain", on_companion.body, "code", "drained")
        assert router.down == {MTP}
        on_primary = routing.route_now(request(STORY), PRIMARY, True)
        assert on_primary is not None and on_primary.url is None
        assert routing.companion_failed(on_primary, "plain") is None  # the primary's own failure is the proxy's
        assert router.down == {MTP}
        for task in list(router._pollers.values()):
            task.cancel()

    asyncio.run(scenario())
