"""The proxy routing requests across two backends over real HTTP on loopback.

Both backends are `FakeBackendForProxyTests` (named so: they answer just enough of llama-server
to see which one got a request); the routing decision, the re-send rule and the gate are the real
proxy's. The emulator-backed end-to-end figures are benchmarks/routing_emulator.py's."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import httpx
import pytest

from specd.proxy.bodies import INLINE_READ_BYTES
from specd.proxy.proxy import Backend, Proxy, ProxySettings
from specd.proxy.routes import Companion, Router, RouteSet
from specd.routing.table import Route, RoutingTable
from specd.traffic.records import Recorder, fetch_records, open_db
from tests.fakes.proxy_fakes import (
    FakeBackendForProxyTests,
    ServerThread,
    chat_body,
    eventually,
    free_port,
    read_stream,
)

TABLE = RoutingTable(routes={"code": Route("mtp", "bench"), "creative": Route("plain", "bench")})
CODE = "Write a python function that adds two numbers"
STORY = "Write a short story about a lighthouse keeper"


@dataclass
class Routes:
    """What the daemon would resolve from the routing state; tests change it and call refresh."""

    now: RouteSet = field(default_factory=RouteSet)

    def __call__(self) -> RouteSet:
        return self.now


@dataclass
class Rig:
    mtp: FakeBackendForProxyTests
    plain: FakeBackendForProxyTests
    mtp_server: ServerThread
    plain_server: ServerThread
    proxy: Proxy
    front: ServerThread
    routes: Routes
    recorder: Recorder
    db: Path

    @property
    def url(self) -> str:
        return self.front.url

    def ask(self, text: str, **extra: object) -> httpx.Response:
        with httpx.Client(timeout=30) as client:
            return client.post(f"{self.url}/v1/chat/completions", json=chat_body(text, **extra))

    def profiles(self) -> list[str | None]:
        self.recorder.flush()
        conn = open_db(self.db)
        try:
            return [r.profile for r in fetch_records(conn, 0)]
        finally:
            conn.close()

    def refresh(self, routes: RouteSet) -> None:
        self.routes.now = routes
        self.front.call(self.proxy.router.refresh)  # type: ignore[union-attr]


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    mtp, plain = FakeBackendForProxyTests(alias="mtp"), FakeBackendForProxyTests(alias="plain")
    mtp_server, plain_server = ServerThread(mtp.app, free_port()).start(), ServerThread(plain.app, free_port()).start()
    routes = Routes(RouteSet(on=True, companions=(Companion(plain_server.url, "plain"),), table=TABLE))
    router = Router(routes, poll_s=0.05)
    recorder = Recorder(tmp_path / "state.db")
    proxy = Proxy(ProxySettings(health_poll_s=0.05, hold_timeout_s=20, unit="t"),
                  lambda: Backend(mtp_server.url, "mtp"), recorder=recorder, router=router)
    front = ServerThread(proxy, free_port()).start()
    made = Rig(mtp, plain, mtp_server, plain_server, proxy, front, routes, recorder, tmp_path / "state.db")
    yield made
    front.stop()
    mtp_server.stop()
    plain_server.stop()
    recorder.close()


def test_each_class_goes_to_its_profile_and_the_row_says_which(rig: Rig) -> None:
    assert rig.ask(CODE).status_code == 200
    assert rig.ask(STORY).status_code == 200
    assert rig.ask("What is the capital of France?").status_code == 200  # no route: the primary
    assert len(rig.mtp.requests) == 2 and len(rig.plain.requests) == 1
    assert rig.plain.requests[0]["body"]["messages"][0]["content"] == STORY
    assert rig.profiles() == ["mtp", "plain", "mtp"]
    with httpx.Client(timeout=10) as client:  # clients see one alias: /v1/models is the primary's
        assert client.get(f"{rig.url}/v1/models").json()["data"][0]["id"] == "mtp"
    assert rig.proxy.status()["routing"]["routed"] == {"mtp route": 1, "plain route": 1, "mtp default": 1}


def test_a_body_too_big_to_parse_on_the_event_loop_is_still_routed_by_its_class(rig: Rig) -> None:
    """A body over INLINE_READ_BYTES is parsed on the proxy's reader thread, never on the loop every
    client shares (specd.proxy.bodies); routing waits for that parse, so a long conversation whose last
    turn asks for a story still goes to the story's profile, and one asking for code to the primary."""
    for opening, text in (("lorem ipsum ", STORY), ("dolor sit amet ", CODE)):  # two conversations
        earlier = [{"role": "user", "content": opening * 1500}, {"role": "assistant", "content": "noted"}]
        body = chat_body(text)
        body["messages"] = earlier + body["messages"]
        assert len(json.dumps(body)) > INLINE_READ_BYTES
        with httpx.Client(timeout=30) as client:
            assert client.post(f"{rig.url}/v1/chat/completions", json=body).status_code == 200
    assert len(rig.plain.requests) == 1 and len(rig.mtp.requests) == 1
    assert rig.plain.requests[0]["body"]["messages"][-1]["content"] == STORY
    assert rig.profiles() == ["plain", "mtp"]


def test_a_stopped_companion_drains_to_the_primary_without_a_failed_request_and_comes_back(rig: Rig) -> None:
    port = rig.plain_server.port
    rig.plain_server.stop()
    for _ in range(3):
        assert rig.ask(STORY).status_code == 200
    assert len(rig.mtp.requests) == 3 and rig.profiles() == ["mtp", "mtp", "mtp"]
    assert rig.proxy.status()["routing"]["companions"][0]["up"] is False
    rig.plain_server = ServerThread(rig.plain.app, port).start()
    eventually(lambda: rig.proxy.status()["routing"]["companions"][0]["up"], "the companion to be seen up again")
    assert rig.ask(STORY).status_code == 200 and len(rig.plain.requests) == 1


def test_a_companion_answering_loading_hands_the_request_to_the_primary(rig: Rig) -> None:
    rig.plain.loading = True
    assert rig.ask(STORY).status_code == 200
    assert len(rig.mtp.requests) == 1 and rig.plain.requests == []
    rig.plain.loading = False
    eventually(lambda: rig.proxy.status()["routing"]["companions"][0]["up"], "the companion's /health to answer")


def test_routing_off_sends_everything_to_one_server_after_the_companions_streams_end(rig: Rig) -> None:
    rig.plain.tokens, rig.plain.token_delay_s = 20, 0.02
    done: list[str] = []

    def story_stream() -> None:
        with httpx.Client(timeout=30) as client:
            done.append(read_stream(client, f"{rig.url}/v1/chat/completions", chat_body(STORY, stream=True))[-1])

    streaming = threading.Thread(target=story_stream)
    streaming.start()
    eventually(lambda: rig.proxy.router is not None and rig.proxy.router.in_flight.get(rig.plain_server.url),
               "the story to reach the companion")
    rig.refresh(RouteSet())
    assert rig.ask(STORY).status_code == 200  # routing off: the primary, while the stream still runs
    assert rig.front.call(lambda: rig.proxy.router.wait_idle([rig.plain_server.url], 20)) is True  # type: ignore[union-attr]
    streaming.join(20)
    assert done == ["[DONE]"]
    assert len(rig.plain.requests) == 1 and len(rig.mtp.requests) == 1


def test_while_the_primary_is_held_for_a_restart_a_companion_answers(rig: Rig) -> None:
    rig.front.call(lambda: rig.proxy.pause(30))
    assert rig.ask(CODE).status_code == 200  # routed to mtp, which is held: the companion answers now
    assert rig.mtp.requests == [] and len(rig.plain.requests) == 1
    rig.front.call(rig.proxy.resume)
    eventually(lambda: rig.proxy.gate.open, "the gate to reopen")
    assert rig.ask(CODE).status_code == 200 and len(rig.mtp.requests) == 1


def test_a_conversation_stays_on_the_server_that_holds_its_prefix(rig: Rig) -> None:
    opening = [{"role": "user", "content": STORY}]
    assert rig.ask(STORY).status_code == 200
    follow_up = [*opening, {"role": "assistant", "content": "Once..."},
                 {"role": "user", "content": "Now write a python function that counts its words"}]
    with httpx.Client(timeout=10) as client:
        assert client.post(f"{rig.url}/v1/chat/completions",
                           json={"model": "x", "messages": follow_up}).status_code == 200
    assert len(rig.plain.requests) == 2 and rig.mtp.requests == []  # a code ask, kept with its conversation


def test_per_request_mode_stamps_the_class_settings_and_the_clients_own_win(rig: Rig) -> None:
    rig.refresh(replace(rig.routes.now, companions=(), stamps={"creative": {"speculative.n_max": 0,
                                                                           "speculative.n_min": 0}}))
    assert rig.ask(STORY).status_code == 200
    assert rig.ask(STORY, **{"speculative.n_max": 5}).status_code == 200
    assert rig.ask(CODE).status_code == 200
    first, second, third = (r["body"] for r in rig.mtp.requests)
    assert (first["speculative.n_max"], first["speculative.n_min"]) == (0, 0)
    assert (second["speculative.n_max"], second["speculative.n_min"]) == (5, 0)
    assert "speculative.n_max" not in third and rig.plain.requests == []


def test_a_companion_restarted_under_a_pooled_connection_keeps_its_requests(rig: Rig) -> None:
    """The stale-connection re-send holds for a companion too: it still answers /health, so the request is
    sent again on a fresh connection to it, and it is not marked down."""
    assert rig.ask(STORY).status_code == 200  # leaves a pooled connection to the companion
    port = rig.plain_server.port
    rig.plain_server.stop()
    rig.plain_server = ServerThread(rig.plain.app, port).start()
    assert rig.ask(STORY).status_code == 200
    assert rig.profiles() == ["plain", "plain"] and rig.mtp.requests == []
    assert rig.proxy.status()["routing"]["companions"][0]["up"] is True


def test_after_requests_to_both_servers_the_drain_finds_the_primary_idle(rig: Rig) -> None:
    """A switch's drain waits for the primary's attempts; with a router in the proxy (the daemon always has
    one) each ended attempt must come off the right server's count."""
    assert rig.ask(CODE).status_code == 200 and rig.ask(STORY).status_code == 200
    assert rig.profiles() == ["mtp", "plain"]
    assert rig.front.call(lambda: rig.proxy.wait_idle(5.0)) is True
    assert rig.front.call(rig.proxy.status)["active"] == 0
