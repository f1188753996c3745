"""A stream relayed to the client (specd.proxy.relay.Relay): every byte the backend sent reaches the
client, whole events go on as soon as they are complete, and the traffic row counts the events however
the backend's reads split them. The backend's reads are split by TCP, which no real server lets a test
choose, so the backend connection and the client's responder here are FAKES (named so) with a real
Exchange; the socket path is tests/unit/test_proxy.py's. Written from mutants of `Relay.on_data` and
`on_end` that lived through the socket tests (benchmarks/results/mutation-proxy.md)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any, ClassVar

from specd.proxy.exchange import Exchange
from specd.proxy.relay import _MAX_PENDING, Relay
from specd.traffic.shape import RequestShape


class FakeUpstream:
    """The backend connection as the relay sees it: a status and pause/resume/attach/close."""

    status = 200

    def __init__(self) -> None:
        self.paused = False

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def attach(self, sink: Any) -> None:
        self.sink = sink

    def close(self) -> None:
        pass


class FakeResponder:
    """The client's side: what was written, each write apart, and the end."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.ended: bytes | None = None
        self.throttled: tuple[Callable[[], None], Callable[[], None]] | None = None

    def start(self, status: int, headers: Any) -> None:
        self.status = status

    def throttle(self, pause: Callable[[], None], resume: Callable[[], None]) -> None:
        self.throttled = (pause, resume)

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def end(self, data: bytes = b"") -> None:
        self.ended = data

    @property
    def received(self) -> bytes:
        return b"".join(self.writes) + (self.ended or b"")


def token(text: str) -> bytes:
    return b"data: " + json.dumps({"choices": [{"delta": {"content": text}}]}).encode() + b"\n\n"


FINAL = b"data: " + json.dumps({"choices": [], "usage": {"completion_tokens": 3}}).encode()  # no "\n\n": the end


def relay_of(*reads: bytes, end: bool = True) -> tuple[FakeResponder, Exchange, FakeUpstream]:
    async def run() -> tuple[FakeResponder, Exchange, FakeUpstream]:
        responder, upstream = FakeResponder(), FakeUpstream()
        exchange = Exchange("/v1/chat/completions", 1, lambda *_: None, shape=RequestShape(stream=True))
        relay = Relay(upstream, responder, exchange)  # type: ignore[arg-type]
        relay.begin([])
        for read in reads:
            relay.on_data(read)
        if end:
            relay.on_end()
        return responder, exchange, upstream

    return asyncio.run(run())


STREAM = token("Hel") + token("lo") + token(" world") + FINAL


def test_every_byte_reaches_the_client_and_every_event_is_counted_however_the_reads_split_them() -> None:
    for step in (1, 2, 3, 7, 50, len(STREAM)):
        reads = [STREAM[i:i + step] for i in range(0, len(STREAM), step)]
        responder, exchange, _ = relay_of(*reads)
        assert responder.received == STREAM, step
        assert exchange.events == 3 and exchange.usage == {"completion_tokens": 3}, step
        assert all(w.endswith(b"\n\n") for w in responder.writes), step  # whole events only, the tail at the end
        assert responder.ended == FINAL


def test_whole_events_go_on_at_once_and_a_partial_one_waits_for_its_end() -> None:
    responder, exchange, upstream = relay_of(token("a") + token("b") + b"data: {\"cho", end=False)
    assert responder.writes == [token("a") + token("b")]  # both complete events, in the same read
    assert exchange.events == 2
    assert responder.throttled == (upstream.pause_reading, upstream.resume_reading)  # a slow client pauses it


def test_a_stream_without_event_boundaries_is_passed_on_in_bounded_pieces() -> None:
    blob = b"x" * (_MAX_PENDING + 10)
    responder, _, _ = relay_of(blob[:_MAX_PENDING - 1], blob[_MAX_PENDING - 1:])
    assert responder.writes == [blob] and responder.received == blob  # not held past the bound


# ---- a whole (not streamed) answer: specd.proxy.relay.respond ---------------------------------------


class FakeWholeUpstream(FakeUpstream):
    """A backend answer read whole, or one that breaks off while it is read (`fails`)."""

    content_type = "application/json"

    def __init__(self, status: int, body: bytes, *, head_only: bool = False, fails: bool = False,
                 length: bytes | None = None) -> None:
        super().__init__()
        self.status, self.body, self.head_only, self.fails = status, body, head_only, fails
        self.headers = [(b"content-type", b"application/json")] + ([(b"content-length", length)] if length else [])

    async def read(self) -> bytes:
        if self.fails:
            raise ConnectionResetError("reset by peer")
        return self.body


class FakeWholeResponder(FakeResponder):
    left = False

    def __init__(self) -> None:
        super().__init__()
        self.answered: tuple[int, list[tuple[bytes, bytes]], bytes] | None = None
        self.errors: list[tuple[int, str, str]] = []
        self.closed = False

    def on_leave(self, callback: Callable[[], None]) -> None:
        pass

    def answer(self, status: int, headers: list[tuple[bytes, bytes]], content: bytes) -> None:
        self.answered = (status, headers, content)

    def error(self, status: int, message: str, kind: str) -> None:
        self.errors.append((status, message, kind))

    def close_connection(self) -> None:
        self.closed = True


def respond_to(upstream: FakeWholeUpstream, shape: RequestShape | None = None) -> tuple[FakeWholeResponder, Any, Any]:
    from specd.proxy.relay import ClientWatch, respond

    finished: list[tuple[int, str | None]] = []

    async def run() -> tuple[FakeWholeResponder, Any, Any]:
        responder = FakeWholeResponder()
        exchange = Exchange("/v1/chat/completions", 1, lambda _e, status, _s, error: finished.append((status, error)),
                            shape=shape or RequestShape())
        watch = ClientWatch(responder)  # type: ignore[arg-type]
        await respond(upstream, exchange, responder, watch, set())  # type: ignore[arg-type]
        return responder, (exchange, finished), watch

    return asyncio.run(run())


def test_a_whole_answer_is_passed_on_and_recorded_and_one_that_breaks_off_is_a_502() -> None:
    body = json.dumps({"choices": [], "usage": {"completion_tokens": 4}}).encode()
    responder, (exchange, finished), watch = respond_to(FakeWholeUpstream(200, body))
    assert responder.answered == (200, [(b"content-type", b"application/json")], body)
    assert finished == [(200, None)] and exchange.usage == {"completion_tokens": 4} and watch.answered is True
    assert not responder.closed
    responder, (exchange, finished), _ = respond_to(FakeWholeUpstream(200, b"", fails=True))
    assert responder.errors == [(502, "the backend dropped the response", "api_error")]
    assert finished == [(502, "backend dropped the response: ConnectionResetError")]
    assert exchange.failed_status == 502 and responder.answered is None


def test_a_head_or_304_answer_keeps_the_backends_length_and_a_refused_unread_body_closes_the_connection() -> None:
    head = FakeWholeUpstream(200, b"", head_only=True, length=b"42")
    for upstream in (head, FakeWholeUpstream(304, b"", length=b"7")):
        responder, _, _ = respond_to(upstream)
        assert responder.answered is not None
        lengths = [v for k, v in responder.answered[1] if k == b"content-length"]
        assert lengths == [upstream.headers[1][1]], upstream.status
        assert (b"content-type", b"application/json") in responder.answered[1]  # the other headers kept
    plain, _, _ = respond_to(FakeWholeUpstream(200, b"{}", length=b"2"))
    assert plain.answered is not None and all(k != b"content-length" for k, _ in plain.answered[1])  # its own
    refused, _, _ = respond_to(FakeWholeUpstream(413, b"{}"), RequestShape(unknown="body over 8388608 bytes"))
    assert refused.closed  # an unreadable body the backend refused: not repeated on a kept-alive connection
    for status in (200, 500):
        kept, _, _ = respond_to(FakeWholeUpstream(status, b"{}"), RequestShape(unknown="body over 8388608 bytes"))
        assert not kept.closed, status


class FakeStreamUpstream(FakeUpstream):
    """A backend stream that sends STREAM and ends once the relay attaches to it."""

    content_type = "text/event-stream"
    head_only = False
    headers: ClassVar[list[tuple[bytes, bytes]]] = [(b"content-type", b"text/event-stream")]

    def attach(self, sink: Any) -> None:
        loop = asyncio.get_running_loop()
        loop.call_soon(sink.on_data, STREAM)
        loop.call_soon(sink.on_end)


def test_a_finished_stream_leaves_the_set_of_relays_a_shutdown_would_stop() -> None:
    from specd.proxy.relay import ClientWatch, respond

    async def run() -> tuple[set[Any], FakeWholeResponder]:
        responder, relays = FakeWholeResponder(), set()
        exchange = Exchange("/v1/chat/completions", 1, lambda *_: None, shape=RequestShape(stream=True))
        await respond(FakeStreamUpstream(), exchange, responder, ClientWatch(responder), relays)  # type: ignore[arg-type]
        return relays, responder

    relays, responder = asyncio.run(run())
    assert responder.received == STREAM and relays == set()  # not kept: a set that grew with every stream
