"""Relaying one exchange between the backend's response and the client.

A stream is forwarded as whole server-sent events the moment each completes (an event is at most
one token for llama-server, so nothing is delayed), straight from the backend connection's
callback to the client's socket: no task, no queue, no wake-up between a token and the client.
Whole events give two guarantees: a stream stopped from outside (the client left, or the proxy
shuts down) ends on an event boundary, followed by an error event and a proper end of body, and
the proxy can read TTFT, token counts and llama-server's final `timings` without parsing every
event. A stream is stopped from outside with `Relay.stop`, which closes its backend connection;
the reason decides what the client is told. A client that reads slowly pauses the backend
connection (TCP back-pressure), as a direct client would.

`ClientWatch` notices a client that hangs up and either cancels the request while it is held or
waiting for the backend (so the backend is freed), or stops its stream.
"""

from __future__ import annotations

import asyncio
from typing import Literal

from specd.proxy.exchange import Exchange, json_object
from specd.proxy.http1 import Headers
from specd.proxy.http1.client import response_headers
from specd.proxy.http1.responder import Responder, error_body
from specd.proxy.http1.response import UpstreamResponse

StopReason = Literal["client", "shutdown"]

_MAX_PENDING = 1024 * 1024  # a "stream" without event boundaries is passed on in pieces this big
_LARGEST_SCANNED_BODY = 4 * 1024 * 1024  # a non-streamed answer bigger than this is passed on unread


class Relay:
    """A streamed response in flight (a `Sink` of the backend's body); `stop` ends it from outside."""

    def __init__(self, upstream: UpstreamResponse, responder: Responder, exchange: Exchange) -> None:
        self.upstream = upstream
        self._responder, self._exchange = responder, exchange
        self.stopped_by: StopReason | None = None
        self._pending = b""
        self._done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def begin(self, headers: Headers) -> None:
        """Start the client's response; the backend's body parts are relayed from now on."""
        self._responder.start(self.upstream.status, headers)
        self._responder.throttle(self.upstream.pause_reading, self.upstream.resume_reading)
        self.upstream.attach(self)

    async def finished(self) -> None:
        """Wait until the body ended, broke off or was stopped (the client was told which)."""
        await self._done

    def stop(self, reason: StopReason) -> None:
        if self.stopped_by is None and not self._done.done():
            self.stopped_by = reason
            self.upstream.close()  # on_error follows at once

    def on_data(self, data: bytes) -> None:
        pending = self._pending + data if self._pending else data
        end = pending.rfind(b"\n\n")
        if end < 0 and len(pending) < _MAX_PENDING:
            self._pending = pending
            return
        cut = len(pending) if end < 0 else end + 2
        chunk, self._pending = pending[:cut], pending[cut:]
        self._responder.write(chunk)  # the client first: reading the chunk is the proxy's business
        self._exchange.scan(chunk)

    def on_end(self) -> None:
        """The end of the body: record first, then let the client see the end."""
        try:
            if self._pending:
                self._exchange.scan(self._pending)
            self._exchange.finish(self.upstream.status)
        finally:  # the client gets its end whatever reading the stream's shape did
            self._responder.end(self._pending)
            self._settle()

    def on_error(self, exc: BaseException) -> None:
        exchange = self._exchange
        if self.stopped_by == "client":
            exchange.finish(499, "client went away")
            self._responder.end()
            self._settle()
            return
        if self.stopped_by == "shutdown":
            exchange.error, exchange.failed_status = "specd proxy is shutting down", 503
        elif isinstance(exc, TimeoutError):
            exchange.error, exchange.failed_status = "the backend stalled: no data within the idle timeout", 504
        else:
            exchange.error, exchange.failed_status = "the backend dropped the stream", 502
        exchange.finish(exchange.failed_status)
        self._responder.end(b"data: " + error_body(exchange.failed_status, exchange.error) + b"\n\n")
        self._settle()

    def _settle(self) -> None:
        if not self._done.done():
            self._done.set_result(None)


class ClientWatch:
    """Notice a client that hangs up: cancel its request while it waits, stop its stream once relayed."""

    def __init__(self, responder: Responder) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._request_task = task
        self.relay: Relay | None = None
        self.left = False
        self.answered = False
        responder.on_leave(self._left)
        if responder.left:  # gone before its task first ran
            self._left()

    def _left(self) -> None:
        if self.answered:
            return
        self.left = True
        if self.relay is not None:
            self.relay.stop("client")
        else:
            self._request_task.cancel()

    def close(self) -> None:
        self.answered = True


def start_stream(upstream: UpstreamResponse, exchange: Exchange, responder: Responder, watch: ClientWatch,
                 relays: set[Relay]) -> None:
    """At the status line (the response's `on_status`, in the backend connection's callback): a
    stream — not a 503 the proxy may re-send — is relayed from its first byte, before the request's
    task runs again; `respond` then waits for it."""
    if upstream.status == 503 or upstream.content_type != "text/event-stream" or watch.relay is not None:
        return
    relay = Relay(upstream, responder, exchange)
    watch.relay = relay
    relays.add(relay)  # where a shutdown finds it
    relay.begin(response_headers(upstream.headers))


async def respond(upstream: UpstreamResponse, exchange: Exchange, responder: Responder, watch: ClientWatch,
                  relays: set[Relay]) -> None:
    """Answer the client from the backend's response: a stream event by event, anything else whole."""
    start_stream(upstream, exchange, responder, watch, relays)  # if `on_status` did not already
    relay = watch.relay
    if relay is not None:
        try:
            await relay.finished()
        finally:
            relays.discard(relay)
            upstream.close()  # a no-op once the body was read to its end (the connection is back in the pool)
        return
    headers = response_headers(upstream.headers)
    if upstream.head_only or upstream.status == 304:  # no body: the backend's length says what GET would get
        headers += [(b"content-length", v) for k, v in upstream.headers if k.lower() == b"content-length"][:1]
    try:
        content = await upstream.read()
    except (TimeoutError, OSError) as exc:
        exchange.failed_status = 502
        exchange.finish(502, f"backend dropped the response: {type(exc).__name__}")
        responder.error(502, "the backend dropped the response", "api_error")
        return
    if len(content) < _LARGEST_SCANNED_BODY:
        exchange.absorb(json_object(content))
    if 400 <= upstream.status < 500 and not exchange.shape.read:
        responder.close_connection()  # a body nobody could read, refused: no kept-alive connection to repeat on
    exchange.finish(upstream.status)
    watch.answered = True
    responder.answer(upstream.status, headers, content)


async def read_whole(upstream: UpstreamResponse) -> bytes:
    """The body of an answer that is not relayed (a 503 while loading), or b"" if it breaks off."""
    try:
        return await upstream.read()
    except (TimeoutError, OSError):
        return b""
