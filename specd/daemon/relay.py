"""Relaying one response through the proxy: the request's recorded shape and the SSE relay.

A stream is forwarded as whole server-sent events the moment each completes (an event is at most
one token for llama-server, so nothing is delayed), which gives two guarantees: a stream cut at
shutdown ends on an event boundary followed by an error event and a proper end of body, and the
proxy can read TTFT, token counts and llama-server's final `timings` without parsing every event.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import httpx
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from specd.traffic.records import TrafficRecord
from specd.traffic.shape import RequestShape
from specd.traffic.taskclass import classify

CUT = object()
"""Put on a relay's queue to end its stream cleanly now (shutdown past its grace period)."""

_TOKEN_EVENT = re.compile(rb'"(?:reasoning_content|content|text)": ?"[^"]')
_MAX_PENDING = 1024 * 1024


class Exchange:
    """One request's shape, filled in as it goes; `finish` reports it exactly once."""

    def __init__(self, endpoint: str, stream: bool, task_class: str | None, in_flight: int,
                 on_finish: Callable[[Exchange, int, float, str | None], None]) -> None:
        self.started = time.perf_counter()
        self.ts = time.time()
        self.endpoint, self.stream, self.task_class, self.in_flight = endpoint, stream, task_class, in_flight
        self._on_finish = on_finish
        self.held_ms = 0.0
        self.ttft_ms: float | None = None
        self.events = 0
        self.usage: dict[str, Any] = {}
        self.timings: dict[str, Any] = {}
        self.profile: str | None = None
        self.attempts = 0
        self.error: str | None = None
        self.failed_status: int | None = None  # set when a started stream ends in error
        self.recorded = True  # goes into the traffic table (proxied POSTs; metrics count everything)
        self.shape = RequestShape()  # sampling and conversation, set by the proxy for a JSON body
        self.done = False

    def absorb(self, document: Any) -> None:
        if isinstance(document, dict):
            if isinstance(document.get("usage"), dict):
                self.usage = document["usage"]
            if isinstance(document.get("timings"), dict):
                self.timings = document["timings"]

    def scan(self, chunk: bytes) -> None:
        """Note token events (TTFT, count) and the usage/timings a final event carries."""
        for event in chunk.split(b"\n\n"):
            if not event.startswith(b"data: ") or event.startswith(b"data: [DONE]"):
                continue
            if _TOKEN_EVENT.search(event):
                self.events += 1
                if self.ttft_ms is None:
                    self.ttft_ms = 1000.0 * (time.perf_counter() - self.started)
            if b'"timings"' in event or b'"usage"' in event:
                self.absorb(json_object(event[6:]))

    def to_record(self, unit: str, status: int, total_s: float, error: str | None) -> TrafficRecord:
        usage, timings = self.usage, self.timings
        completion = _int(usage.get("completion_tokens"))
        if completion is None and self.stream and self.events:
            completion = _int(timings.get("predicted_n")) or self.events
        return TrafficRecord(
            ts=self.ts, endpoint=self.endpoint, stream=self.stream, status=status, total_ms=1000.0 * total_s,
            unit=unit, profile=self.profile, task_class=self.task_class, in_flight=self.in_flight,
            prompt_tokens=_int(usage.get("prompt_tokens")), completion_tokens=completion,
            ttft_ms=self.ttft_ms, held_ms=self.held_ms,
            prompt_n=_int(timings.get("prompt_n")), prompt_ms=_float(timings.get("prompt_ms")),
            predicted_n=_int(timings.get("predicted_n")), predicted_ms=_float(timings.get("predicted_ms")),
            draft_n=_int(timings.get("draft_n")), draft_n_accepted=_int(timings.get("draft_n_accepted")),
            error=error, sampling=self.shape.sampling, conversation=self.shape.conversation, turn=self.shape.turn,
        )

    def finish(self, status: int, error: str | None = None) -> None:
        if self.done:
            return
        self.done = True
        self._on_finish(self, status, time.perf_counter() - self.started, self.error or error)


class RelayResponse(StreamingResponse):
    """A StreamingResponse that always notices a client that left and always runs `on_close`.

    Starlette only watches for a disconnect on old ASGI spec versions; without it, a client that
    hangs up would leave llama-server generating into the void until max_tokens.
    """

    def __init__(self, relay: AsyncIterator[bytes], status: int, headers: dict[str, str],
                 on_close: Callable[[bool], Awaitable[None]]) -> None:
        super().__init__(relay, status_code=status, headers=headers)
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        completed = False

        async def stream(group_scope: anyio.CancelScope) -> None:
            nonlocal completed
            try:
                await self.stream_response(send)
                completed = True
            except OSError:
                pass
            group_scope.cancel()

        try:
            async with anyio.create_task_group() as group:
                group.start_soon(stream, group.cancel_scope)
                await self.listen_for_disconnect(receive)  # after the last byte, uvicorn says so too
                if not completed:
                    group.cancel_scope.cancel()
        finally:
            await self._on_close(not completed)


async def pump(upstream: httpx.Response, queue: asyncio.Queue[object]) -> None:
    """Move the backend's bytes onto the relay's queue; None marks the end, an exception a drop."""
    try:
        async for chunk in upstream.aiter_raw():
            queue.put_nowait(chunk)
    except httpx.HTTPError as exc:
        queue.put_nowait(exc)
        return
    queue.put_nowait(None)


async def relay_events(queue: asyncio.Queue[object], exchange: Exchange, status: int) -> AsyncIterator[bytes]:
    """Forward whole SSE events as they arrive; on a cut or a backend drop, end with an error event."""
    pending = b""
    while True:
        item = await queue.get()
        if item is None:
            if pending:
                exchange.scan(pending)
                yield pending
            exchange.finish(status)  # recorded before the body's end reaches the client
            return
        if item is CUT or isinstance(item, BaseException):
            if item is CUT:
                exchange.error, exchange.failed_status = "specd proxy is shutting down", 503
            elif isinstance(item, httpx.TimeoutException):
                exchange.error, exchange.failed_status = "the backend stalled: no data within the idle timeout", 504
            else:
                exchange.error, exchange.failed_status = "the backend dropped the stream", 502
            error = {"error": {"message": exchange.error, "type": "unavailable_error",
                               "code": exchange.failed_status}}
            yield b"data: " + json.dumps(error).encode() + b"\n\n"
            exchange.finish(exchange.failed_status)
            return
        assert isinstance(item, bytes)
        pending += item
        end = pending.rfind(b"\n\n")
        if end < 0 and len(pending) < _MAX_PENDING:
            continue
        cut = len(pending) if end < 0 else end + 2
        chunk, pending = pending[:cut], pending[cut:]
        exchange.scan(chunk)
        yield chunk


async def read_bounded(request: Request, limit: int) -> bytes | None:
    """The request body, or None when it is over `limit` bytes (declared or as sent)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return None
    parts: list[bytes] = []
    size = 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            return None
        parts.append(part)
    return b"".join(parts)


async def client_gone(request: Request) -> None:
    """Return once the client hangs up (call it only after the body has been read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


class _RedactQueryStrings(logging.Filter):
    """httpx logs each request's URL at INFO (seen with SPECD_DEBUG); a client's query string may
    carry its API key (`?api_key=`), so the proxy's forwards are logged without one."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(a.copy_with(query=None) if isinstance(a, httpx.URL) and a.query else a
                                for a in record.args)
        return True


REDACT_QUERY_STRINGS = _RedactQueryStrings()


CLASSIFY_CHARS = 4096


def task_class_of(messages: list[Any]) -> str | None:
    """The task class, judged on at most CLASSIFY_CHARS of each message's text.

    The classifier's regexes run in the event loop; on unbounded text (one 1 MB "word") they take
    minutes and stall every stream. The ask is in the first few KB of a message anyway.
    """
    clipped: list[Any] = []
    for message in messages:
        if isinstance(message, dict):
            content = message.get("content")
            if isinstance(content, str):
                message = {**message, "content": content[:CLASSIFY_CHARS]}
            elif isinstance(content, list):
                message = {**message, "content": [
                    {**part, "text": part["text"][:CLASSIFY_CHARS]}
                    if isinstance(part, dict) and isinstance(part.get("text"), str) else part
                    for part in content[:64]]}
        clipped.append(message)
    return classify(clipped)


def json_object(data: bytes) -> dict[str, Any] | None:
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):  # deep nesting: "[[[[..." is not a request
        return None
    return document if isinstance(document, dict) else None


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
