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
from typing import Any

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
