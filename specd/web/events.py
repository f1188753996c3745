"""Live updates for the page: an in-process hub, served as server-sent events.

Publishers are threads (a switch's steps arrive from the worker running it) and the event loop
itself; `publish` is safe from either. Each event gets a sequence number; the last few hundred are
kept, so a browser that reconnects (EventSource sends Last-Event-ID) misses nothing recent. A slow
subscriber loses its oldest events rather than holding the publisher.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

KEEP = 500
QUEUE_MAX = 1000
KEEPALIVE_S = 15.0


class EventHub:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()
        self._recent: collections.deque[dict[str, Any]] = collections.deque(maxlen=KEEP)
        self._queues: set[asyncio.Queue[dict[str, Any] | None]] = set()
        self._closed = False

    def publish(self, name: str, /, **data: Any) -> dict[str, Any]:
        """`name` is the SSE event name the page listens for; `data` its JSON payload."""
        with self._lock:
            event = {**data, "seq": next(self._numbers), "event": name, "at": data.get("at", time.time())}
            self._recent.append(event)
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._fan_out, event)
        return event

    def recent(self, after: int = 0) -> list[dict[str, Any]]:
        with self._lock:
            return [event for event in self._recent if event["seq"] > after]

    def _fan_out(self, event: dict[str, Any] | None) -> None:
        for queue in self._queues:
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(event)

    def close(self) -> None:
        """End every stream (the daemon is stopping)."""
        self._closed = True
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._fan_out, None)

    async def stream(self, last_seen: int = 0) -> AsyncIterator[str]:
        """The SSE body: what was missed since `last_seen`, then each new event as it comes."""
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(QUEUE_MAX)
        self._queues.add(queue)
        try:
            yield "retry: 2000\n\n"
            for event in self.recent(last_seen):
                last_seen = event["seq"]
                yield _frame(event)
            while not self._closed:
                try:
                    incoming: dict[str, Any] | None = await asyncio.wait_for(queue.get(), KEEPALIVE_S)
                except TimeoutError:
                    yield ": keep-alive\n\n"
                    continue
                if incoming is None:
                    return
                if incoming["seq"] > last_seen:
                    last_seen = incoming["seq"]
                    yield _frame(incoming)
        finally:
            self._queues.discard(queue)


def _frame(event: dict[str, Any]) -> str:
    return f"id: {event['seq']}\nevent: {event['event']}\ndata: {json.dumps(event, default=str)}\n\n"
