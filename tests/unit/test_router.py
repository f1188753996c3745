"""The proxy's router on its own (specd.proxy.routes.Router): which server a request goes to, what is in
flight where, a companion marked down and back, a route set that changes. Pure asyncio, no sockets; the
same router over real HTTP is tests/unit/test_proxy_routing.py's. Each test here answers a mutant that
lived through the socket tests (benchmarks/results/mutation-proxy.md)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

from specd.proxy.routes import Companion, Routed, Router, RouteSet
from specd.routing.table import Route, RoutingTable

PRIMARY = "http://127.0.0.1:1"  # plain, the serving profile
MTP = "http://127.0.0.1:2"
OTHER = "http://127.0.0.1:3"
TABLE = RoutingTable(routes={"code": Route("mtp", "bench"), "creative": Route("plain", "bench")})
CODE = "Write a python function that adds two numbers"


@dataclass
class Resolve:
    """The route set the daemon would read; a test changes `now` and calls refresh."""

    now: RouteSet = field(default_factory=lambda: RouteSet(True, (Companion(MTP, "mtp"),), TABLE))

    def __call__(self) -> RouteSet:
        return self.now


@dataclass
class Health:
    """A companion's /health as the test sets it; `asked` counts the probes."""

    up: set[str] = field(default_factory=set)
    asked: int = 0

    async def __call__(self, url: str) -> bool:
        self.asked += 1
        return url in self.up


def pick_url(router: Router, target: bytes, document: dict[str, object]) -> str | None:
    """Where the router sends a request (None: the primary)."""
    return router.pick(target, document, json.dumps(document).encode(), PRIMARY, "plain", True, 0).url


def chat(text: str) -> dict[str, object]:
    return {"messages": [{"role": "user", "content": text}]}


def test_a_code_request_goes_to_its_companion_with_or_without_a_query_string() -> None:
    router = Router(Resolve())
    assert pick_url(router, b"/v1/chat/completions", chat(CODE)) == MTP
    assert pick_url(router, b"/v1/chat/completions?trace=1", chat(CODE)) == MTP
    assert pick_url(router, b"/v1/chat/completions", chat("Write a short story about a lighthouse")) is None


def test_a_text_completion_is_routed_by_its_prompt_and_a_body_without_either_is_not() -> None:
    router = Router(Resolve())
    assert pick_url(router, b"/v1/completions", {"prompt": CODE}) == MTP
    assert pick_url(router, b"/v1/completions", {"prompt": ["a", "list"]}) is None
    assert pick_url(router, b"/v1/chat/completions", {"messages": "not a list", "prompt": 3}) is None
    assert pick_url(router, b"/v1/embeddings", chat(CODE)) is None
    assert router.status()["routed"] == {"mtp route": 1}  # the three it does not apply to are not counted


def test_an_unknown_companion_is_none() -> None:
    router = Router(Resolve())
    assert router.companion(MTP) == Companion(MTP, "mtp")
    assert router.companion(OTHER) is None


def test_in_flight_counts_each_request_and_wait_idle_returns_only_once_they_ended() -> None:
    async def scenario() -> None:
        router = Router(Resolve())
        router.begin(MTP)
        router.begin(MTP)
        router.end(MTP)
        assert router.status()["companions"][0]["in_flight"] == 1
        assert await router.wait_idle([MTP], 0.1) is False  # one still in flight at the deadline
        asyncio.get_running_loop().call_soon(router.end, MTP)
        assert await router.wait_idle([MTP], 30) is True
        assert dict(router.in_flight) == {}
        assert await router.wait_idle([MTP, OTHER], 30) is True  # nothing ever sent to OTHER

    asyncio.run(scenario())


def test_a_companion_marked_down_gets_nothing_until_its_health_answers() -> None:
    async def scenario() -> None:
        health = Health()
        router = Router(Resolve(), healthy=health, poll_s=0.01)
        router.mark_down(MTP)
        assert pick_url(router, b"/v1/chat/completions", chat(CODE)) is None  # drained to the primary
        health.up.add(MTP)

        async def back_up() -> None:  # the poller finds it healthy again
            while MTP in router.down:
                await asyncio.sleep(0.01)

        await asyncio.wait_for(back_up(), 30)
        assert pick_url(router, b"/v1/chat/completions", chat(CODE)) == MTP
        router.stop()

    asyncio.run(scenario())


def test_a_refresh_forgets_the_companions_that_left_and_keeps_the_others_down() -> None:
    async def scenario() -> None:
        resolve = Resolve(RouteSet(True, (Companion(MTP, "mtp"), Companion(OTHER, "mtp")), TABLE))
        router = Router(resolve, healthy=Health(), poll_s=30)  # never healthy; the poller sleeps through the test
        router.mark_down(MTP)
        router.mark_down(OTHER)
        resolve.now = RouteSet(True, (Companion(OTHER, "mtp"),), TABLE, sticky_s=7)
        await router.refresh()
        assert router.down == {OTHER}  # MTP left the set; OTHER is still down
        assert router.affinity.ttl_s == 7
        router.stop()

    asyncio.run(scenario())


def test_status_says_what_the_router_holds() -> None:
    async def scenario() -> None:
        router = Router(Resolve(), healthy=Health(), poll_s=30)
        pick_url(router, b"/v1/chat/completions", chat(CODE))
        router.begin(MTP)
        assert router.status()["conversations"] == 1  # the conversation is on MTP now
        router.mark_down(MTP)  # ... and forgotten with it: its prefix cache may be gone
        assert router.status() == {
            "on": True, "mode": "servers",
            "companions": [{"url": MTP, "profile": "mtp", "up": False, "in_flight": 1}],
            "routed": {"mtp route": 1}, "conversations": 0}
        router.stop()

    asyncio.run(scenario())


def test_what_the_router_returns_is_what_the_traffic_row_and_the_counts_say() -> None:
    router = Router(Resolve())
    code, story = chat(CODE), chat("Write a short story about a lighthouse")
    body = json.dumps(code).encode()
    assert router.pick(b"/v1/embeddings", code, body, PRIMARY, "plain", True, 0) == Routed(None, "plain", body)
    assert router.pick(b"/v1/chat/completions", code, body, PRIMARY, "plain", True, 0) == Routed(
        MTP, "mtp", body, "code", "route")
    story_body = json.dumps(story).encode()
    assert router.pick(b"/v1/chat/completions", story, story_body, PRIMARY, "plain", True, 0) == Routed(
        None, "plain", story_body, "creative", "route")
    router.pick(b"/v1/chat/completions", code, body, PRIMARY, "plain", True, 0)
    assert router.status()["routed"] == {"mtp route": 2, "plain route": 1}


def test_per_request_mode_returns_the_stamped_body_for_the_primary() -> None:
    router = Router(Resolve(RouteSet(True, (), TABLE, stamps={"code": {"speculative.n_max": 0}})))
    body = json.dumps(chat(CODE)).encode()
    routed = router.pick(b"/v1/chat/completions", chat(CODE), body, PRIMARY, "plain", True, 0)
    assert (routed.url, routed.profile, routed.task_class, routed.reason) == (None, "plain", "code", "route")
    assert json.loads(routed.body)["speculative.n_max"] == 0


def test_a_target_whose_query_holds_another_question_mark_is_routed_by_its_path() -> None:
    router = Router(Resolve())
    assert pick_url(router, b"/v1/chat/completions?next=/a?b", chat(CODE)) == MTP


def test_a_refresh_keeps_the_conversations_on_companions_that_stay_and_forgets_those_that_left() -> None:
    async def scenario() -> None:
        resolve = Resolve(RouteSet(True, (Companion(MTP, "mtp"), Companion(OTHER, "mtp")), TABLE))
        router = Router(resolve, healthy=Health(), poll_s=30)
        assert pick_url(router, b"/v1/chat/completions", chat(CODE)) == MTP  # a conversation on MTP
        router.begin(MTP)  # MTP busy: the next one goes to OTHER, the other mtp server
        assert pick_url(router, b"/v1/chat/completions", chat(f"{CODE}, and one that subtracts them")) == OTHER
        assert router.status()["conversations"] == 2
        resolve.now = RouteSet(True, (Companion(MTP, "mtp"),), TABLE)  # OTHER leaves
        await router.refresh()
        assert router.status()["conversations"] == 1  # MTP's stays: its prefix is still cached there
        follow_up = {"messages": [{"role": "user", "content": CODE}, {"role": "assistant", "content": "def add"},
                                  {"role": "user", "content": "Now a poem about it."}]}
        picked = router.pick(b"/v1/chat/completions", follow_up, b"{}", PRIMARY, "plain", True, 0)
        assert (picked.url, picked.reason) == (MTP, "conversation")
        router.stop()

    asyncio.run(scenario())


def test_status_shows_an_idle_companion_with_nothing_in_flight_and_the_per_request_mode() -> None:
    router = Router(Resolve())
    assert router.status()["companions"] == [{"url": MTP, "profile": "mtp", "up": True, "in_flight": 0}]
    stamped = Router(Resolve(RouteSet(True, (), TABLE, stamps={"creative": {"speculative.n_max": 0}})))
    assert stamped.status()["mode"] == "per-request"


def test_a_busy_routed_companion_sends_the_next_request_to_the_idle_primary_at_the_sets_busy_at() -> None:
    router = Router(Resolve(RouteSet(True, (Companion(MTP, "mtp"),), TABLE, busy_at=1)))
    router.begin(MTP)  # one in flight on MTP: busy at 1; the table has no slowdowns to weigh
    picked = router.pick(b"/v1/chat/completions", chat(CODE), b"{}", PRIMARY, "plain", True, 0)
    assert (picked.url, picked.reason) == (None, "load")
    patient = Router(Resolve())  # the default busy_at waits for more in flight
    patient.begin(MTP)
    assert pick_url(patient, b"/v1/chat/completions", chat(CODE)) == MTP
