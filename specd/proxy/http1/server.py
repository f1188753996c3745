"""The proxy's server: HTTP/1.1 connections from clients parsed by httptools, one request at a time.

Every request through the proxy pays for this layer, so it is an asyncio protocol with httptools
(llhttp, the parser uvicorn uses) and no ASGI between a client's bytes and the proxy: no message
dicts, no per-request receive/send coroutines, no task watching for a disconnect; the handler is
called the moment a request is whole, and may act before its task first runs (the proxy sends the
request upstream right there).

What it does itself, so the proxy sees only whole requests:
- a request's headers must arrive within `header_timeout_s` of the connection opening or of the
  previous response ending (slowloris), its body within `body_timeout_s` (408), and the body may
  not exceed `max_body_bytes`, declared or sent chunked (413, the connection closed, lingering so
  that a client still sending its body reads the 413 and not a reset), nor take the bytes held
  for all clients past their daemon-wide bound (503: specd.proxy.http1.bodies); one sweep
  over the connections enforces the deadlines, so a request arms and cancels no timer;
- the request target may not exceed `max_target_bytes` (414) nor the request line and headers
  together `max_head_bytes` (431), as nginx's `large_client_header_buffers` bound them; the parser
  is never fed more of a head than that (httptools joins a header's pieces by concatenation, so
  an unbounded header costs time in the square of its size and stalls every connection);
- request trailers are read and dropped: they never join the headers the handler sees;
- `Expect: 100-continue` (any case) is answered; a malformed request gets a 400 and the connection closes;
- pipelined requests are answered in order, one at a time;
- a response's headers leave with its first body bytes (one send where two would do), or alone at
  the end of the event loop's turn when no body bytes are ready;
- a client that goes away is reported to whoever handles its request (`Responder.on_leave`), and
  a client that reads slowly pauses the producer (`Responder.throttle`).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, cast
from urllib.parse import unquote

import httptools

from specd.proxy.http1 import Headers
from specd.proxy.http1.bodies import Body, BodyBuffer, HeldBytes
from specd.proxy.http1.responder import Responder, error_body

log = logging.getLogger("specd.proxy.proxy")
_SINCE_ORDER = itertools.count()  # uvloop's clock ticks in ms: ties go by when the wait began

_BUSY_BODY = error_body(503, "specd proxy: too many client connections, all busy; retry")
BUSY_ANSWER = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n"
               b"connection: close\r\ncontent-length: %d\r\n\r\n%b" % (len(_BUSY_BODY), _BUSY_BODY))
# Past this much of a body, each read waits for the loop's next turn: libuv reads a ready socket up
# to 32 times in one go, and 32 x 256 KiB of copying stalled every other client in that turn.
YIELD_AFTER_BYTES = 256 * 1024
LINGER_S = 5.0  # how long a refused client may go on sending before its connection is closed (nginx: 5 s)


MAX_TARGET_BYTES = 8 * 1024  # nginx: one 8k buffer for the request line, then 414
MAX_HEAD_BYTES = 32 * 1024  # nginx: 4 x 8k (large_client_header_buffers), then "too large"


@dataclass(frozen=True)
class FrontLimits:
    max_body_bytes: int
    body_timeout_s: float
    header_timeout_s: float
    max_target_bytes: int = MAX_TARGET_BYTES
    max_head_bytes: int = MAX_HEAD_BYTES  # the request line and the headers
    held: HeldBytes = field(default_factory=HeldBytes)  # request bytes held for clients: shared, daemon-wide


@dataclass
class ClientRequest:
    """One whole request as the client sent it (the body de-chunked)."""

    method: str
    target: bytes  # the raw request target: path and query as sent
    headers: Headers
    body: Body = b""
    received: float = 0.0  # time.perf_counter() when the whole request was in
    held: int = 0  # bytes of `body` counted in the daemon's HeldBytes until the request is answered

    @functools.cached_property
    def path(self) -> str:
        """The target's path, percent-decoded (what routes and metrics are named by); a target that
        is no URL (`OPTIONS *`) is its own path."""
        try:
            path = httptools.parse_url(self.target).path
        except httptools.HttpParserInvalidURLError:
            path = self.target.partition(b"?")[0]  # never the query: it may carry an API key
        return unquote(path.decode("latin-1"))


@dataclass(frozen=True)
class Refusal:
    """The answer to an unusable request (400, 408, 413, 414, 431), waiting its turn on the connection."""

    status: int
    message: str
    kind: str


Handler = Callable[[ClientRequest, Responder], Coroutine[Any, Any, None]]


class Admission(Protocol):
    """Who keeps the count of open connections (specd.proxy.http1.listener.FrontServer)."""

    def admit(self, connection: FrontConnection) -> bool: ...
    def discard(self, connection: FrontConnection) -> None: ...


class FrontConnection(asyncio.Protocol):
    """One client connection: parse requests, hand each whole one to `handler`, in order."""

    def __init__(self, handler: Handler, limits: FrontLimits, admission: Admission) -> None:
        self.loop = asyncio.get_running_loop()
        self._handler, self._limits, self._admission = handler, limits, admission
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._partial: ClientRequest | None = None
        self._headers: Headers = []  # the partial request's, names lowercased
        self._body = BodyBuffer(limits.held, limits.max_body_bytes)
        self._request: ClientRequest | None = None  # the one being answered
        # The request head being read: its bytes so far (bounded by max_head_bytes before the parser
        # sees them) and its target's (bounded by max_target_bytes as it arrives: llhttp hands the
        # target over piece by piece, at the end of every read).
        self._in_head = True
        self._head_bytes = 0
        self._target_size = 0
        self._queue: deque[tuple[ClientRequest, bool, bool] | Refusal] = deque()
        self._responder: Responder | None = None
        self._task: asyncio.Task[None] | None = None
        # What the client owes (headers since the open or the last answer, or a body), since when; swept.
        self._owes: Literal["headers", "body"] | None = "headers"
        self._since = self.loop.time(), next(_SINCE_ORDER)
        self._throttled: tuple[Callable[[], None], Callable[[], None]] | None = None
        self._writing_paused = False
        self.keep_alive = True
        self.closed = False
        self._refused = False  # answered an unusable request: the rest of what the client sent is ignored
        self._linger_until: float | None = None  # closing after a refusal: see `_close_lingering`

    # ---- the connection -----------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self._responder is not None

    @property
    def idle_since(self) -> tuple[float, int] | None:
        """(loop time, order) since when this connection waits for a request it has not begun sending
        (None: a request is under way): what may be closed to make room, oldest first, as nginx does."""
        if self.busy or self._queue or self._owes != "headers" or self._head_bytes or self._linger_until is not None:
            return None
        return self._since

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports are not its subclasses
        if not self._admission.admit(self):
            self.closed = True  # at the limit and every connection busy: a clear answer, then the close
            self._transport.write(BUSY_ANSWER)
            self._transport.close()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        try:
            while data and self._in_head and not self._refused:
                room = self._limits.max_head_bytes - self._head_bytes
                piece, data = data[:room], data[room:]
                self._head_bytes += len(piece)
                self._parser.feed_data(piece)
                if self._in_head and self._head_bytes >= self._limits.max_head_bytes:
                    self._refuse(431, f"request line and headers over {self._limits.max_head_bytes} bytes")
            if data and not self._refused:
                self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self.keep_alive = False  # the request before the upgrade is answered; nothing after it is read
        except httptools.HttpParserError:
            self._refuse(400, "malformed HTTP request")
        if self._owes == "body" and self._body.size >= YIELD_AFTER_BYTES and self._transport is not None:
            self._transport.pause_reading()  # a big body: one read per turn of the loop, others' turns between
            self.loop.call_soon(self._read_on)

    def _read_on(self) -> None:
        if self._owes == "body" and not self.busy and not self.closed and self._transport is not None:
            self._transport.resume_reading()  # (busy: a pipelined body, read on when the answer before it ends)

    def eof_received(self) -> bool:
        return False  # a client that half-closes is gone: close (uvicorn does the same)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._admission.discard(self)
        self._body.drop()
        for entry in self._queue:  # pipelined and never to be answered (the one in hand is, by `_handled`)
            if isinstance(entry, tuple):
                self._release(entry[0])
        if self._throttled is not None:
            self._throttled[1]()  # a paused producer must not stay paused for a client that is gone
            self._throttled = None
        if self._responder is not None:
            self._responder.client_left()

    def pause_writing(self) -> None:
        self._writing_paused = True
        if self._throttled is not None:
            self._throttled[0]()

    def resume_writing(self) -> None:
        self._writing_paused = False
        if self._throttled is not None:
            self._throttled[1]()

    def throttle(self, pause: Callable[[], None], resume: Callable[[], None]) -> None:
        self._throttled = (pause, resume)
        if self._writing_paused:
            pause()

    def send(self, data: bytes) -> None:
        if not self.closed and self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    # ---- parsing (httptools callbacks) --------------------------------------------------------

    def on_message_begin(self) -> None:
        self._partial = ClientRequest("", b"", [])
        self._headers = self._partial.headers
        self._body.drop()
        self._target_size = 0

    def on_url(self, url: bytes) -> None:
        self._target_size += len(url)
        if self._target_size > self._limits.max_target_bytes:
            self._refuse(414, f"request target over {self._limits.max_target_bytes} bytes")
        elif self._partial is not None and not self._refused:
            self._partial.target += url

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._in_head:  # after the head: a trailer, read and dropped (never forwarded as a header)
            self._headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self._in_head = False
        request = self._partial
        if request is None or self._refused:
            return
        request.method = self._parser.get_method().decode("ascii", "replace")
        declared = next((v for k, v in request.headers if k == b"content-length"), None)
        refused = self._body.expect(int(declared)) if declared is not None and declared.isdigit() else None
        if refused is not None:
            self._refuse(*refused)
            return
        self._owes, self._since = "body", (self.loop.time(), next(_SINCE_ORDER))
        expects = next((v for k, v in request.headers if k == b"expect"), None)
        if expects is not None and expects.strip().lower() == b"100-continue" and not self.busy and not self._queue:
            self.send(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        if self._refused:
            return
        refused = self._body.add(body)
        if refused is not None:
            self._refuse(*refused)

    def on_message_complete(self) -> None:
        request, self._partial = self._partial, None
        self._in_head, self._head_bytes = True, 0  # the next request's head starts here
        if request is None or self.closed or self._refused:
            return
        request.body, request.held = self._body.take()
        request.received = time.perf_counter()
        self._owes = None
        keep_alive = self._parser.should_keep_alive()
        chunked_ok = self._parser.get_http_version() == "1.1"
        self._queue.append((request, keep_alive, chunked_ok))
        if self.busy:
            if self._transport is not None:
                self._transport.pause_reading()  # pipelined: nothing more is read until this is answered
        else:
            self._next()

    # ---- requests ------------------------------------------------------------------------------

    def _next(self) -> None:
        if not self._queue or self.closed:
            return
        entry = self._queue.popleft()
        if isinstance(entry, Refusal):
            self._answer_refusal(entry)
            return
        request, keep_alive, chunked_ok = entry
        self.keep_alive = self.keep_alive and keep_alive
        responder = self._responder = Responder(self, head_only=request.method == "HEAD", chunked_ok=chunked_ok)
        self._request = request
        try:
            handling = self._handler(request, responder)  # may act at once (the proxy sends upstream here)
        except Exception:
            log.exception("proxy error")
            self._release(request)
            self._responder = self._request = None
            self.keep_alive = False
            responder.error(500, "specd proxy error", "api_error")
            return
        self._task = self.loop.create_task(handling)
        self._task.add_done_callback(self._handled)

    def _handled(self, task: asyncio.Task[None]) -> None:
        responder, self._responder, self._task = self._responder, None, None
        if self._request is not None:
            self._release(self._request)
            self._request = None
        failed = None if task.cancelled() else task.exception()
        if failed is not None:
            log.error("proxy error", exc_info=failed)
        if responder is not None and not responder.ended:
            if responder.started or self.closed:
                self.keep_alive = False  # a response cut short: only closing the connection says so
                responder.ended = True
            else:
                responder.error(500, "specd proxy error", "api_error")
        self.response_ended()

    def response_ended(self) -> None:
        """The answer went out (or was cut): next request, or close."""
        self._throttled = None
        if self._responder is not None and self._task is not None and not self._task.done():
            return  # the handler is still finishing up; `_handled` comes back here
        if not self.keep_alive:
            if self._refused:
                self._close_lingering()
            else:
                self.close()
            return
        if self._queue:
            self._next()
        else:
            self._owes, self._since = "headers", (self.loop.time(), next(_SINCE_ORDER))
            if self._transport is not None and not self.closed:
                self._transport.resume_reading()

    def _refuse(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        """An unusable request: nothing after it is read. It is answered in its turn, after the
        requests before it on this connection (the one being answered may still be finishing up),
        and then the connection closes."""
        if self._refused:
            return
        self._refused = True
        self._body.drop()  # a refused body is never used: its bytes go back at once
        if self.busy or self._queue:
            self._queue.append(Refusal(status, message, kind))
        else:
            self._answer_refusal(Refusal(status, message, kind))

    def _release(self, request: ClientRequest) -> None:
        """The request is answered (or never will be): its body's bytes are no longer held."""
        self._limits.held.release(request.held)
        request.held = 0

    def _answer_refusal(self, refusal: Refusal) -> None:
        self.keep_alive = False
        Responder(self, head_only=False, chunked_ok=False).error(refusal.status, refusal.message, refusal.kind)
        self._close_lingering()

    def _close_lingering(self) -> None:
        """Close after a refusal as nginx's lingering close does: once the answer is out our side is
        shut for writing, and what the client still sends (the rest of a refused body) is read and
        dropped until it closes or LINGER_S pass. Closed with the client's bytes unread, the kernel
        resets the connection, and the reset can reach the client before the answer it was about to
        read (a 413 lost to a client still writing its body)."""
        transport = self._transport
        if self._linger_until is not None or transport is None or transport.is_closing():
            return
        if not transport.can_write_eof():
            self.close()
            return
        transport.write_eof()
        transport.resume_reading()
        self._linger_until = self.loop.time() + LINGER_S

    def enforce_deadlines(self, now: float) -> None:
        """Close a connection whose client owes a request's headers past the header timeout (nothing to
        answer), or answer 408 to one that owes a body past the body timeout."""
        if self._linger_until is not None:
            if now > self._linger_until:
                self.close()
            return
        if self.busy or self.closed or self._owes is None:
            return
        if self._owes == "headers" and now - self._since[0] > self._limits.header_timeout_s:
            self.close()
        elif self._owes == "body" and now - self._since[0] > self._limits.body_timeout_s:
            self._refuse(408, f"request body not received within {self._limits.body_timeout_s:g} s")
