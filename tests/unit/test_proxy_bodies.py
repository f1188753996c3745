"""Hostile and big request bodies at the proxy over loopback (issue 36): forwarded whole, recorded as
"shape unknown" when past the reading bounds, held within one daemon-wide bound (503 past it), and
a refused request's connection closed once its answer is out.

The backend is the FAKE `FakeBackendForProxyTests` (it answers 400 to a body that is no JSON
object, as llama-server does). The memory and latency figures with the real daemon are
benchmarks/hostile_bodies.py's; the real llama-server's answers to deep nests are
tests/system/test_fault_hostile_bodies.py's.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from specd.proxy.http1.bodies import HeldBytes
from specd.proxy.proxy import Backend, Proxy, ProxySettings
from specd.proxy.routes import Routed
from specd.traffic.records import Recorder, TrafficRecord, fetch_records, open_db
from specd.traffic.shape import MAX_READ_BYTES, MAX_READ_ITEMS
from tests.fakes.http1_raw import read_until_closed
from tests.fakes.proxy_fakes import FakeBackendForProxyTests, ServerThread, chat_body, eventually, free_port

HELD_LIMIT = 1 << 20


class Rig:
    """One FAKE backend and two proxies in front of it (two deployments) sharing one HeldBytes."""

    def __init__(self, tmp_path: Path, held_limit: int = HELD_LIMIT, **settings: Any) -> None:
        self.fake = FakeBackendForProxyTests(tokens=4)
        self.backend = ServerThread(self.fake.app, free_port()).start()
        self.recorder = Recorder(tmp_path / "state.db")
        self.db = tmp_path / "state.db"
        self.held = HeldBytes(limit=held_limit)
        self.proxies = [Proxy(ProxySettings(health_poll_s=0.05, unit=f"u{n}", max_body_bytes=16 << 20, **settings),
                              lambda: Backend(self.backend.url, "plain"), recorder=self.recorder, held=self.held)
                        for n in range(2)]
        self.fronts = [ServerThread(proxy, free_port()).start() for proxy in self.proxies]

    def url(self, which: int = 0) -> str:
        return f"{self.fronts[which].url}/v1/chat/completions"

    def records(self) -> list[TrafficRecord]:
        self.recorder.flush()
        conn = open_db(self.db)
        try:
            return fetch_records(conn, 0)
        finally:
            conn.close()

    def settled(self) -> bool:
        return all(p.in_flight == 0 and p.active == 0 for p in self.proxies) and self.held.held == 0

    def close(self) -> None:
        for front in self.fronts:
            front.stop()
        self.backend.stop()
        self.recorder.close()


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    made = Rig(tmp_path)
    yield made
    made.close()


def post(url: str, body: bytes) -> httpx.Response:
    with httpx.Client(timeout=60) as client:
        return client.post(url, content=body, headers={"content-type": "application/json"})


def padded(size: int, **extra: Any) -> bytes:
    """A chat body of about `size` bytes whose padding is small JSON objects."""
    head = json.dumps(chat_body(**extra))[:-1].encode() + b', "x_items": ['
    return head + b'{"k":1},' * ((size - len(head)) // 8) + b'{"k":1}]}'


def head(size: int, path: str = "/v1/chat/completions") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {size}\r\n\r\n").encode()



# ---- what is read of a body and what is recorded ----------------------------------------------------


def test_bodies_past_the_reading_bounds_are_forwarded_whole_and_recorded_as_shape_unknown(tmp_path: Path) -> None:
    rig = Rig(tmp_path, held_limit=64 << 20)
    try:
        check_bodies_past_the_reading_bounds(rig)
    finally:
        rig.close()


def check_bodies_past_the_reading_bounds(rig: Rig) -> None:
    many_items = padded(1_000_000, text="Write a python function")  # ~125,000 small objects
    too_big = padded(MAX_READ_BYTES + 4096)
    readable = padded(200_000, text="Write a python function", stream=True)  # over the inline size: read off-loop
    for body in (many_items, too_big, readable):
        assert post(rig.url(), body).status_code == 200
    forwarded = [len(request["body"]["x_items"]) for request in rig.fake.requests]
    assert forwarded == [len(json.loads(body)["x_items"]) for body in (many_items, too_big, readable)]
    eventually(lambda: len(rig.records()) == 3, "three traffic rows")
    rows = sorted(rig.records(), key=lambda row: row.ts)
    assert [row.shape_unknown for row in rows] == [f"over {MAX_READ_ITEMS} JSON items",
                                                   f"body over {MAX_READ_BYTES} bytes", None]
    assert [row.task_class for row in rows] == [None, None, "code"]
    assert rows[2].stream and rows[2].completion_tokens == 4  # read: a stream, its tokens counted
    eventually(rig.settled, "every body's bytes given back")


def test_a_nest_too_deep_to_read_is_forwarded_and_the_backends_answer_relayed(rig: Rig) -> None:
    nested = json.dumps(chat_body())[:-1].encode() + b', "x_nest": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"
    answer = post(rig.url(), nested)  # llama-server reads it and answers 200 (tests/system); the FAKE cannot
    assert answer.status_code == 400 and answer.json()["error"]["message"] == "bad json"  # the backend's own
    assert len(rig.fake.requests) == 1
    eventually(lambda: len(rig.records()) == 1, "the traffic row")
    assert rig.records()[0].shape_unknown == "nested too deep to read"


# ---- a refused request's connection -------------------------------------------------------------


def test_a_body_the_backend_refuses_and_nobody_could_read_ends_its_connection(rig: Rig) -> None:
    nest = b"[" * 200_000 + b"]" * 200_000  # no JSON object: the backend answers 400, as llama-server does
    with socket.create_connection(("127.0.0.1", rig.fronts[0].port), timeout=30) as sock:
        sock.sendall(head(len(nest)) + nest)
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 400") and b"connection: close\r\n" in answer.lower()
    readable_400 = json.dumps(chat_body(x_fake_status=400, x_fake_raw="{}")).encode()
    with socket.create_connection(("127.0.0.1", rig.fronts[0].port), timeout=30) as sock:
        sock.sendall(head(len(readable_400)) + readable_400 + head(len(readable_400)) + readable_400)
        both = b""
        while both.count(b"HTTP/1.1 400") < 2:  # the same connection answers the next request: kept alive
            both += sock.recv(65536)
    eventually(rig.settled, "the proxy to settle")


@pytest.mark.parametrize("case", ["declared over the body limit (413)", "malformed (400)"])
def test_a_request_the_proxy_refuses_is_answered_and_its_connection_closed(rig: Rig, case: str) -> None:
    sent = head(32 << 20) if "413" in case else b"GARBAGE / HTTP/1.1\r\n\r\n"
    with socket.create_connection(("127.0.0.1", rig.fronts[0].port), timeout=30) as sock:
        sock.sendall(sent)
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 413" if "413" in case else b"HTTP/1.1 400")
    assert b"connection: close\r\n" in answer.lower()


# ---- the daemon-wide bound on bytes held for clients ------------------------------------------------


def test_past_the_daemon_wide_bound_a_request_gets_503_and_the_bytes_come_back(rig: Rig) -> None:
    with socket.create_connection(("127.0.0.1", rig.fronts[0].port), timeout=30) as hog:
        hog.sendall(head(HELD_LIMIT - 1024) + b"x" * (HELD_LIMIT * 3 // 4))  # then silence: held, unanswered
        eventually(lambda: rig.held.held == HELD_LIMIT * 3 // 4, "the partial upload to be held")
        with socket.create_connection(("127.0.0.1", rig.fronts[1].port), timeout=30) as declared:
            declared.sendall(head(HELD_LIMIT // 2))  # the other proxy: the bound is the daemon's
            answer = read_until_closed(declared)
        assert answer.startswith(b"HTTP/1.1 503") and b"retry-after: 5\r\n" in answer.lower()
        assert f"limit of {HELD_LIMIT} bytes".encode() in answer and b"connection: close\r\n" in answer.lower()
        with httpx.Client(timeout=30) as client:  # no Content-Length: refused at the byte past the bound
            chunked = client.post(rig.url(1), content=iter([b"x" * 65536] * 8))
        assert chunked.status_code == 503
        assert post(rig.url(1), json.dumps(chat_body()).encode()).status_code == 200  # small ones still fit
        eventually(lambda: rig.held.held == HELD_LIMIT * 3 // 4, "the small request's bytes back: only the hog's held")
    eventually(lambda: rig.held.held == 0, "the hog's bytes to come back when it left")
    assert post(rig.url(1), padded(HELD_LIMIT // 2)).status_code == 200
    assert rig.fake.requests[-1]["body"] is not None and len(rig.fake.requests) == 2
    eventually(rig.settled, "the proxy to settle")


def test_a_partial_upload_is_answered_408_and_its_bytes_come_back(tmp_path: Path) -> None:
    rig = Rig(tmp_path, body_timeout_s=1.0)
    try:
        with socket.create_connection(("127.0.0.1", rig.fronts[0].port), timeout=30) as stalled:
            stalled.sendall(head(600_000) + b"x" * 300_000)
            eventually(lambda: rig.held.held == 300_000, "the partial body to be held")
            answer = read_until_closed(stalled)
        assert answer.startswith(b"HTTP/1.1 408")
        eventually(lambda: rig.held.held == 0, "its bytes to come back")
        assert rig.fake.requests == []
    finally:
        rig.close()


class FakeSentRequest:
    """FAKE: a request the proxy sent as it arrived (UpstreamResponse's part the abandon path uses); a real
    client cannot be made to leave inside the milliseconds a big body's off-loop read takes."""

    closed = False

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("sent_at_once", [True, False], ids=["sent-at-once", "not-sent-yet"])
def test_a_client_that_leaves_while_its_big_body_is_read_frees_the_request_already_sent(sent_at_once: bool) -> None:
    async def scenario() -> tuple[bool, int]:
        proxy = Proxy(ProxySettings(unit="t"), lambda: Backend("http://127.0.0.1:9", "plain"))
        never = asyncio.Event()

        async def read_forever(body: bytes) -> Any:
            await never.wait()

        proxy._reader.read = read_forever  # type: ignore[method-assign]
        route, sent = Routed(None, "plain", b"{}"), FakeSentRequest()
        if sent_at_once:
            proxy._attempts.begin(route)  # as `handle` does when it sends at once
        reading = asyncio.ensure_future(
            proxy._read_off_loop(b"{}", sent if sent_at_once else None, route))  # type: ignore[arg-type]
        await asyncio.sleep(0)
        reading.cancel()  # the client left
        with pytest.raises(asyncio.CancelledError):  # the cancellation itself, for the handler that expects it
            await reading
        return sent.closed, proxy._attempts.active

    # the backend's connection closed and the drain's count back to 0; nothing to undo when nothing was sent
    assert asyncio.run(scenario()) == (sent_at_once, 0)
