"""A response from the backend on its way in: the status line first, then the body part by part.

`send` (specd.proxy.http1.client) returns once the status line and headers are in; the body goes
to whoever attaches a `Sink`, from the connection's own callback: no reader task, no queue, no
wake-up per token. What went wrong before a status line is an `UpstreamFailed` with a
`resend.Outcome`, so the re-send rule never sees transport exceptions; a body that breaks off
later reaches the sink as `TimeoutError` (silent for the read timeout: hung) or `ConnectionError`
(dropped).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from specd.proxy.http1 import Headers
from specd.proxy.resend import Outcome

if TYPE_CHECKING:
    from specd.proxy.http1.client import BackendConnection

log = logging.getLogger("specd.proxy.proxy")



class UpstreamFailed(Exception):
    """One attempt to reach the backend failed before a status line came back."""

    def __init__(self, outcome: Outcome, cause: BaseException, *, reused: bool = False) -> None:
        super().__init__(f"{outcome}: {type(cause).__name__}")
        self.outcome: Outcome = outcome
        self.cause_name = type(cause).__name__
        self.reused = reused  # it went out on a keep-alive connection that had served before


class MalformedResponse(ConnectionError):
    """The backend sent bytes that are not an HTTP/1.1 response."""


def outcome_of(exc: BaseException) -> Outcome:
    """What an exception raised before any status line says about the request."""
    if isinstance(exc, MalformedResponse):
        return "failed"
    if isinstance(exc, TimeoutError):
        return "timed-out"
    if isinstance(exc, OSError):
        return "dropped"  # accepted, then closed or reset before a status line
    return "failed"


class Sink(Protocol):
    """Who consumes a response body, part by part, from the connection's callbacks."""

    def on_data(self, data: bytes) -> None: ...
    def on_end(self) -> None: ...
    def on_error(self, exc: BaseException) -> None: ...


class _WholeBody:
    """A sink that gathers the whole body into one future."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.parts: list[bytes] = []
        self.future: asyncio.Future[bytes] = loop.create_future()

    def on_data(self, data: bytes) -> None:
        self.parts.append(data)

    def on_end(self) -> None:
        if not self.future.done():
            self.future.set_result(b"".join(self.parts))

    def on_error(self, exc: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(exc)


class UpstreamResponse:
    """One response on its way in: status and headers first (`send` returns then), the body to a Sink."""

    def __init__(self, connection: BackendConnection, read_timeout_s: float | None, head_only: bool, *,
                 reused: bool = False) -> None:
        self._connection = connection
        self.reused = reused  # sent on a keep-alive connection that had served an earlier response
        self._loop = connection.loop
        self.sent_at = time.perf_counter()  # made as the request is handed to the socket
        self.status = 0
        self.headers: Headers = []
        self.head_only = head_only
        self.informational = False  # a 1xx answer is being read; the real one follows
        self.close_delimited = False  # no Content-Length, not chunked: the backend's close ends the body
        self._started: asyncio.Future[None] = self._loop.create_future()
        self._read_timeout_s: float | None = None
        self.last_read = self._loop.time()
        self._paused = False
        self._timer: asyncio.TimerHandle | None = None
        self._buffer: list[bytes] = []
        self._sink: Sink | None = None
        # Called the moment the status line and headers are in, before any body part is handed on:
        # a stream can be relayed from its first byte without waiting for the sender's task to run.
        self.on_status: Callable[[UpstreamResponse], None] | None = None
        self.done = False
        self._error: BaseException | None = None
        self.set_read_timeout(read_timeout_s)

    @property
    def content_type(self) -> str:
        value = next((v for k, v in self.headers if k.lower() == b"content-type"), b"")
        return value.split(b";", 1)[0].strip().lower().decode("latin-1")

    async def started(self) -> None:
        """Wait for the status line and headers; UpstreamFailed if the attempt failed first."""
        try:
            await self._started
        except asyncio.CancelledError:
            self.close()
            raise

    # ---- fed by the connection ---------------------------------------------------------------

    def headers_done(self, status: int) -> None:
        self.status = status
        if self.on_status is not None:  # in this callback: the body parts that follow go where it says
            try:
                self.on_status(self)
            except Exception:
                log.exception("proxy error at the status line")
        if not self._started.done():
            self._started.set_result(None)

    def data(self, body: bytes) -> None:
        if self._sink is not None:
            self._sink.on_data(body)
        else:
            self._buffer.append(body)

    def complete(self) -> None:
        if self.done:
            return
        self.done = True
        self._stop_timer()
        if self._sink is not None:
            self._sink.on_end()

    def broke(self, exc: BaseException) -> None:
        if self.done:
            return
        self.done = True
        self._error = exc
        self._stop_timer()
        if not self._started.done():
            self._started.set_exception(UpstreamFailed(outcome_of(exc), exc, reused=self.reused))
            self._started.exception()  # retrieved: nobody may be waiting any more (a cancelled send)
        elif self._sink is not None:
            self._sink.on_error(exc)

    # ---- for the proxy ------------------------------------------------------------------------

    def attach(self, sink: Sink) -> None:
        """Hand the body to `sink`: what already arrived at once, the rest as it comes."""
        self._sink = sink
        buffered, self._buffer = self._buffer, []
        for part in buffered:
            sink.on_data(part)
        if self.done:
            if self._error is not None:
                sink.on_error(self._error)
            else:
                sink.on_end()

    async def read(self) -> bytes:
        """The whole body; TimeoutError or ConnectionError if it breaks off."""
        whole = _WholeBody(self._loop)
        self.attach(whole)
        try:
            return await whole.future
        except asyncio.CancelledError:
            self.close()
            raise

    def set_read_timeout(self, read_timeout_s: float | None) -> None:
        """Bound each wait for bytes from now on (None: no bound)."""
        self._stop_timer()
        self._read_timeout_s = read_timeout_s
        if read_timeout_s is not None and not self.done:
            self._timer = self._loop.call_later(read_timeout_s, self._check_stall)

    def pause_reading(self) -> None:
        self._paused = True
        self._connection.pause_reading()

    def resume_reading(self) -> None:
        self._paused = False
        self.last_read = self._loop.time()
        self._connection.resume_reading()

    def close(self) -> None:
        """Abandon the body: the connection is closed (not reused) and the sink told at once."""
        if not self.done:
            self._connection.detach()
            self.broke(ConnectionAbortedError("closed by the proxy"))

    def _check_stall(self) -> None:
        assert self._read_timeout_s is not None
        idle = self._loop.time() - self.last_read
        if self._paused or idle < self._read_timeout_s:
            self._timer = self._loop.call_later(self._read_timeout_s - (0 if self._paused else idle),
                                                self._check_stall)
            return
        self._timer = None
        self._connection.detach()
        self.broke(TimeoutError(f"no data from the backend for {self._read_timeout_s:g} s"))

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
