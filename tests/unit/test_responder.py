"""What the proxy's server writes for one answer (specd.proxy.http1.responder.Responder): the bytes on the
wire for a whole answer, an error, a HEAD, a 204 and a stream, byte for byte. The connection is a FAKE
(RecordingConnectionFake: it records what is sent); the same answers go over real sockets in
test_http1_conformance.py, where a HEAD's or a 204's framing is checked against a client's parser, not the
bytes."""

from __future__ import annotations

import asyncio
import json

from specd.proxy.http1.responder import Responder


class RecordingConnectionFake:
    """FAKE: the FrontConnection calls a Responder makes, recorded."""

    def __init__(self, loop: asyncio.AbstractEventLoop, *, keep_alive: bool = True) -> None:
        self.loop, self.keep_alive, self.closed = loop, keep_alive, False
        self.sent: list[bytes] = []
        self.ended = 0

    def send(self, data: bytes) -> None:
        self.sent.append(data)  # anything but bytes fails the join in `wire`

    def response_ended(self) -> None:
        self.ended += 1


def wire(scenario: object, *, head_only: bool = False, chunked_ok: bool = True) -> bytes:
    """What `scenario(responder)` put on the wire, the loop run until its callbacks are done."""
    async def run() -> bytes:
        connection = RecordingConnectionFake(asyncio.get_running_loop())
        scenario(Responder(connection, head_only=head_only, chunked_ok=chunked_ok))  # type: ignore[arg-type, operator]
        for _ in range(3):
            await asyncio.sleep(0)
        assert connection.ended == 1
        return b"".join(connection.sent)
    return asyncio.run(run())


def test_an_error_is_an_openai_style_json_document_with_its_length() -> None:
    sent = wire(lambda r: r.error(503, "busy"))
    head, body = sent.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 503 Service Unavailable\r\n") and b"\r\nretry-after: 5" in head
    assert b"\r\ncontent-length: %d" % len(body) in head
    assert json.loads(body) == {"error": {"message": "busy", "type": "unavailable_error", "code": 503}}


def test_an_error_to_a_head_request_sends_the_head_alone() -> None:
    sent = wire(lambda r: r.error(503, "busy"), head_only=True)
    assert sent.endswith(b"\r\n\r\n") and b"error" not in sent  # no body: the client would read it as the next answer


def test_a_204_carries_no_content_length_even_when_handed_one() -> None:
    sent = wire(lambda r: r.answer(204, [(b"content-length", b"0"), (b"x-kept", b"yes")], b""))
    assert sent == b"HTTP/1.1 204 No Content\r\nx-kept: yes\r\n\r\n"


def test_an_end_without_a_start_is_a_500_not_a_headless_body() -> None:
    sent = wire(lambda r: r.end(b"stray"))
    head, body = sent.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 500 Internal Server Error\r\n")
    assert json.loads(body) == {"error": {"message": "specd proxy error", "type": "api_error", "code": 500}}


def test_a_stream_is_chunk_framed_for_http_1_1_and_raw_for_1_0() -> None:
    def stream(responder: Responder) -> None:
        responder.start(200, [(b"content-type", b"text/event-stream")])
        responder.write(b"data: 1\n\n")  # in the same turn as the start: the head goes out with it
        asyncio.get_running_loop().call_soon(responder.end, b"data: 2\n\n")  # after the head's own flush ran

    chunked = wire(stream)
    assert chunked == (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                       b"9\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n0\r\n\r\n")
    raw = wire(stream, chunked_ok=False)
    assert raw == (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
                   b"data: 1\n\ndata: 2\n\n")


def test_a_304_keeps_the_length_it_was_handed_and_sends_no_body() -> None:
    """RFC 9110 §15.4.5: a 304's Content-Length is the one the GET would have had (the backend's, passed on)."""
    sent = wire(lambda r: r.answer(304, [(b"etag", b'"v1"'), (b"content-length", b"7")], b""))
    assert sent == b'HTTP/1.1 304 Not Modified\r\netag: "v1"\r\ncontent-length: 7\r\n\r\n'


def test_a_status_without_a_standard_reason_goes_out_with_an_empty_reason() -> None:
    """A backend's own status (Cloudflare-style 520, nginx's 499) passes with an empty reason phrase (RFC 9112 §4)."""
    sent = wire(lambda r: r.answer(520, [], b"{}"))
    assert sent == b"HTTP/1.1 520 \r\ncontent-length: 2\r\n\r\n{}"
