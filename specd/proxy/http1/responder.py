"""Answering one request on a client connection: whole, or as a stream of parts.

The status line and headers are held until the first body bytes, so both leave in one write (one
packet, one wake-up of the client), or alone at the end of the event loop's turn when no body
bytes are ready: a stream's headers never wait for its first token. A streamed answer is chunked
(close-delimited for an HTTP/1.0 client).

Framing follows RFC 9110/9112: a 1xx or 204 answer carries neither Content-Length nor
Transfer-Encoding nor a body (§8.6, §6.1); a 304 and any answer to HEAD carry no body, and
Content-Length only when the handler gives one (the proxy passes the backend's: a HEAD answer says
how long the GET's body would be, not 0).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from http import HTTPStatus
from typing import TYPE_CHECKING

from specd.proxy.http1 import Headers

if TYPE_CHECKING:
    from specd.proxy.http1.server import FrontConnection



def error_body(status: int, message: str, kind: str = "unavailable_error") -> bytes:
    """An OpenAI-style error document."""
    return json.dumps({"error": {"message": message, "type": kind, "code": status}}).encode()


def no_length(status: int) -> bool:
    """A status whose answer must carry no Content-Length or Transfer-Encoding (RFC 9110 §8.6, 9112 §6.1)."""
    return status < 200 or status == 204


def no_body(status: int) -> bool:
    return no_length(status) or status == 304


class Responder:
    """One request's answer to its client: `answer` whole, or `start`, `write`..., `end`."""

    def __init__(self, connection: FrontConnection, *, head_only: bool, chunked_ok: bool) -> None:
        self._connection = connection
        self._head_only, self._chunked_ok = head_only, chunked_ok
        self._chunked = False
        self._held: bytes | None = None  # the status line and headers, waiting for the first body bytes
        self.started = False
        self.ended = False
        self._on_leave: Callable[[], None] | None = None

    @property
    def left(self) -> bool:
        """The client went away before the answer ended."""
        return self._connection.closed and not self.ended

    def close_connection(self) -> None:
        """The connection closes once this answer is out (say so before the answer starts)."""
        self._connection.keep_alive = False

    def on_leave(self, callback: Callable[[], None] | None) -> None:
        """`callback` runs once if the client goes away before `end`."""
        self._on_leave = callback

    def throttle(self, pause: Callable[[], None], resume: Callable[[], None]) -> None:
        """While the client's socket buffer is full, the producer is paused (`pause`/`resume`)."""
        self._connection.throttle(pause, resume)

    def answer(self, status: int, headers: Headers, body: bytes) -> None:
        """A whole response: headers and body in one write. A Content-Length in `headers` is kept only
        for an answer without a body (HEAD, 304); otherwise the body's own length is sent."""
        bodiless = self._head_only or no_body(status)
        if no_length(status):
            headers = [(k, v) for k, v in headers if k != b"content-length"]
        elif not bodiless:
            headers = [*[(k, v) for k, v in headers if k != b"content-length"], (b"content-length", b"%d" % len(body))]
        self._head(status, headers)
        head, self._held = self._held or b"", None
        self._finish(head + (b"" if bodiless else body))

    def error(self, status: int, message: str, kind: str = "unavailable_error") -> None:
        headers: Headers = [(b"content-type", b"application/json")]
        if status == 503:
            headers.append((b"retry-after", b"5"))
        self.answer(status, headers, error_body(status, message, kind))

    def start(self, status: int, headers: Headers) -> None:
        """A response whose body follows in parts (chunked; close-delimited for an HTTP/1.0 client)."""
        if no_body(status):  # nothing may follow: the parts are dropped, no framing is announced
            self._head_only = True
        elif self._chunked_ok:
            self._chunked = True
            headers = [*headers, (b"transfer-encoding", b"chunked")]
        else:
            self._connection.keep_alive = False
        self._head(status, headers)
        self._connection.loop.call_soon(self._flush_head)

    def write(self, data: bytes) -> None:
        if not data or self.ended or self._head_only:
            return
        if self._chunked:
            data = b"%x\r\n%b\r\n" % (len(data), data)
        if self._held is not None:
            data, self._held = self._held + data, None
        self._connection.send(data)

    def end(self, data: bytes = b"") -> None:
        if self.ended:
            return
        if not self.started:  # a handler's bug: an end with no status line before it would be no HTTP
            self.error(500, "specd proxy error", "api_error")
            return
        if data and not self._head_only:
            data = b"%x\r\n%b\r\n" % (len(data), data) if self._chunked else data
        else:
            data = b""
        if self._chunked and not self._head_only:
            data += b"0\r\n\r\n"
        head, self._held = self._held or b"", None
        self._finish(head + data)

    def _head(self, status: int, headers: Headers) -> None:
        assert not self.started, "one response per request"
        self.started = True
        try:
            reason = HTTPStatus(status).phrase.encode()
        except ValueError:
            reason = b""
        lines = [b"HTTP/1.1 %d %b\r\n" % (status, reason)]
        lines.extend(name + b": " + value + b"\r\n" for name, value in headers)
        if not self._connection.keep_alive:
            lines.append(b"connection: close\r\n")
        lines.append(b"\r\n")
        self._held = b"".join(lines)

    def _flush_head(self) -> None:
        if self._held is not None and not self.ended:
            held, self._held = self._held, None
            self._connection.send(held)

    def _finish(self, data: bytes) -> None:
        self.ended = True
        self._on_leave = None
        if data:
            self._connection.send(data)
        self._connection.response_ended()

    def client_left(self) -> None:
        callback, self._on_leave = self._on_leave, None
        if callback is not None and not self.ended:
            callback()
