"""Relaying one exchange between the client (ASGI) and the backend's response.

A stream is forwarded as whole server-sent events the moment each completes (an event is at most
one token for llama-server, so nothing is delayed), read straight from the backend's connection
in the request's own task: no pump task, no queue, no task group between a token and the client.
Whole events give two guarantees: a stream stopped from outside (the client left, or the proxy
shuts down) ends on an event boundary, followed by an error event and a proper end of body, and
the proxy can read TTFT, token counts and llama-server's final `timings` without parsing every
event. A stream is stopped from outside by closing its backend connection (`Relay.stop`), which
wakes the pending read; the reason decides what the client is told.

`ClientWatch` is the one extra task per request: it notices a client that hangs up (uvicorn says
so only through `receive`) and either cancels the request while it is held or waiting for the
backend (so the backend is freed), or stops its stream.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import aiohttp

from specd.daemon.exchange import Exchange, json_object
from specd.daemon.upstream import response_headers

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
StopReason = Literal["client", "shutdown"]

_MAX_PENDING = 1024 * 1024  # a "stream" without event boundaries is passed on in pieces this big
_LARGEST_SCANNED_BODY = 4 * 1024 * 1024  # a non-streamed answer bigger than this is passed on unread


class ClientLeft(Exception):
    """The client hung up before its request body arrived."""


def error_body(status: int, message: str, kind: str = "unavailable_error") -> bytes:
    return json.dumps({"error": {"message": message, "type": kind, "code": status}}).encode()


async def send_whole(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [*headers, (b"content-length", b"%d" % len(body))]})
    await send({"type": "http.response.body", "body": body})


async def send_error(send: Send, status: int, message: str, kind: str = "unavailable_error") -> None:
    headers = [(b"content-type", b"application/json")]
    if status == 503:
        headers.append((b"retry-after", b"5"))
    await send_whole(send, status, headers, error_body(status, message, kind))


async def read_body(receive: Receive, declared: bytes | None, limit: int) -> bytes | None:
    """The request body, or None when it is over `limit` bytes (declared or as sent)."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return None
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientLeft
        part = message.get("body", b"")
        size += len(part)
        if size > limit:
            return None
        parts.append(part)
        if not message.get("more_body", False):
            return parts[0] if len(parts) == 1 else b"".join(parts)


class Relay:
    """A streamed response in flight; `stop` ends it from outside, on an event boundary."""

    def __init__(self, upstream: aiohttp.ClientResponse) -> None:
        self.upstream = upstream
        self.stopped_by: StopReason | None = None

    def stop(self, reason: StopReason) -> None:
        if self.stopped_by is None:
            self.stopped_by = reason
            self.upstream.close()  # the pending read raises at once


class ClientWatch:
    """Notice a client that hangs up: cancel its request while it waits, stop its stream once relayed."""

    def __init__(self, receive: Receive) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._request_task = task
        self.relay: Relay | None = None
        self.left = False
        self.answered = False  # set before the last byte: uvicorn then reports a disconnect, harmlessly
        self._task = asyncio.get_running_loop().create_task(self._watch(receive))

    async def _watch(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        if self.answered:
            return
        self.left = True
        if self.relay is not None:
            self.relay.stop("client")
        else:
            self._request_task.cancel()

    def close(self) -> None:
        self.answered = True
        self._task.cancel()


async def respond(upstream: aiohttp.ClientResponse, exchange: Exchange, send: Send, watch: ClientWatch,
                  relays: set[Relay]) -> None:
    """Answer the client from the backend's response: a stream event by event, anything else whole."""
    headers = response_headers(upstream.raw_headers)
    if upstream.content_type == "text/event-stream":
        relay = Relay(upstream)
        watch.relay = relay
        relays.add(relay)  # where a shutdown finds it
        try:
            await relay_stream(relay, send, exchange, upstream.status, headers)
        finally:
            relays.discard(relay)
            upstream.close()  # a no-op once the body was read to its end (the connection is back in the pool)
        return
    try:
        content = await upstream.read()
    except (TimeoutError, aiohttp.ClientError) as exc:
        upstream.close()
        exchange.failed_status = 502
        exchange.finish(502, f"backend dropped the response: {type(exc).__name__}")
        await send_error(send, 502, "the backend dropped the response", "api_error")
        return
    if len(content) < _LARGEST_SCANNED_BODY:
        exchange.absorb(json_object(content))
    exchange.finish(upstream.status)
    watch.answered = True
    await send_whole(send, upstream.status, headers, content)


async def read_whole(upstream: aiohttp.ClientResponse) -> bytes:
    """The body of an answer that is not relayed (a 503 while loading), or b"" if it breaks off."""
    try:
        return await upstream.read()
    except (TimeoutError, aiohttp.ClientError):
        return b""
    finally:
        upstream.release()


async def relay_stream(relay: Relay, send: Send, exchange: Exchange, status: int,
                       headers: list[tuple[bytes, bytes]]) -> None:
    """Forward whole SSE events as they arrive; a drop, a stall or a stop ends with an error event."""
    content = relay.upstream.content
    await send({"type": "http.response.start", "status": status, "headers": headers})
    pending = b""
    while True:
        try:
            data = await content.readany()
        except (TimeoutError, aiohttp.ClientError) as exc:
            await _end_in_error(relay, send, exchange, exc)
            return
        if relay.stopped_by is not None:  # stopped between reads: the data may be cut short
            await _end_in_error(relay, send, exchange, None)
            return
        if not data:  # the end of the body: record first, then let the client see the end
            if pending:
                exchange.scan(pending)
            exchange.finish(status)
            await send({"type": "http.response.body", "body": pending})
            return
        pending += data
        end = pending.rfind(b"\n\n")
        if end < 0 and len(pending) < _MAX_PENDING:
            continue
        cut = len(pending) if end < 0 else end + 2
        chunk, pending = pending[:cut], pending[cut:]
        exchange.scan(chunk)
        await send({"type": "http.response.body", "body": chunk, "more_body": True})


async def _end_in_error(relay: Relay, send: Send, exchange: Exchange, exc: BaseException | None) -> None:
    relay.upstream.close()
    if relay.stopped_by == "client":
        exchange.finish(499, "client went away")
        return
    if relay.stopped_by == "shutdown":
        exchange.error, exchange.failed_status = "specd proxy is shutting down", 503
    elif isinstance(exc, TimeoutError):
        exchange.error, exchange.failed_status = "the backend stalled: no data within the idle timeout", 504
    else:
        exchange.error, exchange.failed_status = "the backend dropped the stream", 502
    exchange.finish(exchange.failed_status)
    event = b"data: " + error_body(exchange.failed_status, exchange.error) + b"\n\n"
    await send({"type": "http.response.body", "body": event})
