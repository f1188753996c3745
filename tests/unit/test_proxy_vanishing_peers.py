"""A peer of the proxy that vanishes at an awkward moment, over real sockets on loopback: a backend that never
completes the TCP handshake, a companion that drops a request on a kept-alive connection, a client that leaves
while its big body is still being read. Written from the survivors of the proxy's mutation run
(benchmarks/results/mutation-proxy.md).

Backends are FakeBackendForProxyTests and FakeScriptedBackend (named so: llama-server drops no connection
on demand); the black hole is a real listening socket whose accept queue is full, so the kernel drops the
SYNs that follow, as a firewalled or wedged host does.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from specd.proxy.http1 import client as upstream_client
from specd.proxy.proxy import Backend, Proxy, ProxySettings
from specd.proxy.routes import Companion, Router, RouteSet
from specd.routing.table import Route, RoutingTable
from specd.traffic import shape
from tests.fakes.http1_raw import FakeScriptedBackend
from tests.fakes.proxy_fakes import FakeBackendForProxyTests, ServerThread, chat_body, eventually, free_port
from tests.fakes.proxy_rig import ProxyRig


@pytest.fixture
def black_hole() -> Iterator[str]:
    """The URL of a backend that never completes a TCP handshake: a listener that never accepts, its accept
    queue (`listen(0)`) filled first, so the kernel drops every later SYN and connect() just waits."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(2):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(("127.0.0.1", port))
        fillers.append(filler)
    probe = socket.socket()
    probe.settimeout(1.0)
    with pytest.raises(TimeoutError):  # the hole is real: a plain connect hangs
        probe.connect(("127.0.0.1", port))
    probe.close()
    yield f"http://127.0.0.1:{port}"
    for filler in fillers:
        filler.close()
    listener.close()


def test_a_backend_that_never_accepts_is_answered_503_at_the_hold_timeout_not_left_hanging(
        black_hole: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each connect gives up after CONNECT_TIMEOUT_S (the request never reached the server, so the proxy holds
    it and tries again); at the hold timeout the client gets a clear 503. Without the connect timeout the first
    connect() would wait out the kernel's SYN retries (about two minutes), past the hold timeout and the client's."""
    monkeypatch.setattr(upstream_client, "CONNECT_TIMEOUT_S", 0.3)
    proxy = Proxy(ProxySettings(health_poll_s=0.05, unit="t", hold_timeout_s=2.0), lambda: Backend(black_hole, "p"))
    front = ServerThread(proxy, free_port(), grace_s=1.0).start()
    try:
        with httpx.Client(timeout=20) as client:
            answer = client.post(f"{front.url}/v1/chat/completions", json=chat_body())
        assert answer.status_code == 503 and answer.headers["retry-after"] == "5"
        assert answer.json()["error"]["message"] == "backend not healthy after 2 s"
        assert front.call(lambda: (proxy.in_flight, proxy.active)) == (0, 0)
    finally:
        front.stop()


# ---- a companion that drops a request on a kept-alive connection --------------------------------------


TABLE = RoutingTable(routes={"creative": Route("plain", "bench")})
STORY = "Write a short story about a lighthouse keeper"
ANSWER = json.dumps({"object": "chat.completion", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "Once"}, "finish_reason": "stop"}]}).encode()
ANSWERED = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%b" % (len(ANSWER),
                                                                                                  ANSWER)


def test_a_companion_that_drops_a_request_on_a_kept_alive_connection_while_healthy_gets_it_once_more(
        tmp_path: Path) -> None:
    """The keep-alive race (the companion closed a pooled connection as the next request went out on it) is
    covered for a companion as for the primary: the companion still answers /health, so the request is sent
    again, once, on a fresh connection, and the client gets the companion's answer, not a 502."""
    calls: list[int] = []

    def first_answers_second_drops(request: bytes) -> bytes:
        calls.append(len(calls))
        return FakeScriptedBackend.CLOSE if len(calls) == 2 else ANSWERED

    companion = FakeScriptedBackend()
    companion.scripts[b"/v1/chat/completions"] = first_answers_second_drops
    primary = FakeBackendForProxyTests(alias="mtp")
    primary_server = ServerThread(primary.app, free_port()).start()
    routes = RouteSet(on=True, companions=(Companion(companion.url, "plain"),), table=TABLE)
    proxy = Proxy(ProxySettings(health_poll_s=0.05, hold_timeout_s=20, unit="t"),
                  lambda: Backend(primary_server.url, "mtp"), router=Router(lambda: routes, poll_s=0.05))
    front = ServerThread(proxy, free_port()).start()
    try:
        with httpx.Client(timeout=20) as client:
            answers = [client.post(f"{front.url}/v1/chat/completions", json=chat_body(STORY)) for _ in range(2)]
        assert [a.status_code for a in answers] == [200, 200]
        assert answers[1].json()["choices"][0]["message"]["content"] == "Once"
        first, dropped, again = companion.connection_of_request
        assert first == dropped != again  # sent once more, on a new connection
        assert primary.requests == []  # the story stayed with its profile
        assert front.call(lambda: proxy.status()["routing"]["companions"][0]["up"])
    finally:
        front.stop()
        primary_server.stop()
        companion.stop()


# ---- a client that leaves while its big body is read --------------------------------------------------


class FakeSlowShapeReader:
    """FAKE: `specd.traffic.shape.read_shape` on the proxy's reader thread, held until the test lets it go (a
    real read of a big body takes milliseconds: no client can be made to leave inside them)."""

    def __init__(self) -> None:
        self.reading, self.release = threading.Event(), threading.Event()

    def __call__(self, body: Any) -> shape.RequestShape:
        self.reading.set()
        self.release.wait(30)
        return shape.read_shape(body)


def test_a_client_that_leaves_while_its_big_body_is_read_frees_the_backend_it_was_already_sent_to(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A body too big to read on the event loop is sent upstream at once (on a pooled connection) and its
    shape read on the reader's thread meanwhile. A client that leaves during that read must not leave the
    backend working on its request (the connection is closed) nor a drain waiting for it forever."""
    reader = FakeSlowShapeReader()
    rig = ProxyRig(tmp_path)
    try:
        with httpx.Client(timeout=20) as client:  # leaves a kept-alive connection in the proxy's pool
            assert client.post(rig.chat_url, json=chat_body()).status_code == 200
        monkeypatch.setattr("specd.proxy.bodies.read_shape", reader)
        big = json.dumps(chat_body("lorem ipsum " * 2000, x_fake_hang_before_answer=True)).encode()
        with socket.create_connection(("127.0.0.1", rig.front.port), timeout=20) as sock:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%b" % (len(big), big))
            assert reader.reading.wait(20), "the big body's shape was never read off the loop"
            eventually(lambda: len(rig.fake.requests) == 2, "the big request to reach the backend as it arrived")
        eventually(lambda: rig.fake.abandoned == 1, "the proxy to hang up on the backend", timeout_s=10)
        eventually(rig.settled, "nothing in flight or talking to the backend", timeout_s=10)
        assert rig.front.call(lambda: rig.proxy.wait_idle(1.0))  # a drain would not wait on it
    finally:
        reader.release.set()
        rig.close()
