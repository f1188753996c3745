"""Answering one request on a client connection: whole, or as a stream of parts.

The status line and headers are held until the first body bytes, so both leave in one write (one
packet, one wake-up of the client), or alone at the end of the event loop's turn when no body
bytes are ready: a stream's headers never wait for its first token. A streamed answer is chunked
(close-delimited for an HTTP/1.0 client).
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

    def on_leave(self, callback: Callable[[], None] | None) -> None:
        """`callback` runs once if the client goes away before `end`."""
        self._on_leave = callback

    def throttle(self, pause: Callable[[], None], resume: Callable[[], None]) -> None:
        """While the client's socket buffer is full, the producer is paused (`pause`/`resume`)."""
        self._connection.throttle(pause, resume)

    def answer(self, status: int, headers: Headers, body: bytes) -> None:
        """A whole response: headers and body in one write."""
        self._head(status, [*headers, (b"content-length", b"%d" % len(body))])
        head, self._held = self._held or b"", None
        self._finish(head + (b"" if self._head_only else body))

    def error(self, status: int, message: str, kind: str = "unavailable_error") -> None:
        headers: Headers = [(b"content-type", b"application/json")]
        if status == 503:
            headers.append((b"retry-after", b"5"))
        self.answer(status, headers, error_body(status, message, kind))

    def start(self, status: int, headers: Headers) -> None:
        """A response whose body follows in parts (chunked; close-delimited for an HTTP/1.0 client)."""
        if self._chunked_ok:
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
