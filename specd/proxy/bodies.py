"""Where the proxy reads a request body's shape: at once when that costs next to nothing, else off
the event loop.

Every client's requests and streams share one event loop, so a body's shape (what the traffic row
keeps, specd.traffic.shape) is read on it only when the body is small (INLINE_READ_BYTES: parsing
and classifying it takes well under a millisecond); a bigger one is read on one worker thread, one
body at a time, so at most one parsed document is alive whatever arrives at once. A body past the
reading bounds (specd.traffic.shape.MAX_READ_BYTES, MAX_READ_ITEMS) is not parsed at all: its
shape is unknown, and it is forwarded as sent. Waiting for the worker never holds up the request
itself, which may already be on its way to the backend.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from specd.proxy.http1.bodies import Body
from specd.traffic.shape import MAX_READ_BYTES, RequestShape, read_document, read_shape

INLINE_READ_BYTES = 8 * 1024


class BodyReader:
    """Reads request bodies' shapes: `read_now` for those the loop may read itself, `read` for the rest."""

    def __init__(self, inline_bytes: int = INLINE_READ_BYTES) -> None:
        self._inline_bytes = inline_bytes
        self._worker: ThreadPoolExecutor | None = None

    def inline(self, body: Body) -> bool:
        """Whether the loop may parse `body` itself (routing reads the document before the send)."""
        return len(body) <= self._inline_bytes

    def read_now(self, body: Body) -> RequestShape | None:
        """The shape when it costs the event loop next to nothing (a small body, or one too big to
        parse at all); None: `await read(body)`."""
        if len(body) <= self._inline_bytes:
            return read_shape(body)
        if len(body) > MAX_READ_BYTES:
            return RequestShape(unknown=f"body over {MAX_READ_BYTES} bytes")
        return None

    async def read(self, body: Body) -> RequestShape:
        """The shape, read on the worker thread."""
        return await asyncio.get_running_loop().run_in_executor(self._executor(), read_shape, body)

    async def document(self, body: Body) -> dict[str, Any] | None:
        """The body as a JSON object within the reading bounds (specd.traffic.shape.read_document), on
        the worker thread."""
        return await asyncio.get_running_loop().run_in_executor(self._executor(), read_document, body)

    def _executor(self) -> ThreadPoolExecutor:
        if self._worker is None:
            self._worker = ThreadPoolExecutor(1, thread_name_prefix="specd-body-reader")
        return self._worker

    def close(self) -> None:
        if self._worker is not None:
            self._worker.shutdown(wait=False, cancel_futures=True)
