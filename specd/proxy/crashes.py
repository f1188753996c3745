"""Naming the request a backend went down on, without keeping what the request said.

When llama-server aborts on some input (a `GGML_ASSERT`), the proxy sees the connection it had just
handed that request dropped, and the server no longer answering `/health`. That request is the
likely cause, and the owner needs to find it again: the proxy reports the crash
(`Proxy(on_crash=...)`) and the daemon writes a `crash-after-request` event to the history; the
proxy's journal line says the same. Every request in flight drops at the same instant and each
handler notices its own drop a moment apart, so the drops of one crash are gathered for
`GATHER_S` and reported together: with one request in flight that request is named as the cause,
with several each is listed and the report says one of them is.

A request is identified by the first 12 hex digits of the SHA-256 of its body as the client sent
it: the owner can hash the body their client logged and compare, identical retries share the
identifier, and the identifier reveals nothing of the text. The body itself is never stored here.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from specd.proxy.exchange import Exchange

log = logging.getLogger("specd.proxy.proxy")

Phase = Literal["before answering", "mid-stream"]
ID_HEX_DIGITS = 12
GATHER_S = 1.0


def request_id(body: bytes | bytearray) -> str:
    """A short, safe identifier of a request body (see the module docstring)."""
    return hashlib.sha256(body).hexdigest()[:ID_HEX_DIGITS]


@dataclass(frozen=True)
class DroppedRequest:
    """A request the backend accepted and dropped, after which it stopped answering /health."""

    request_id: str
    method: str
    endpoint: str  # the path only: a query string may carry an API key
    body_bytes: int
    stream: bool
    profile: str | None
    received_at: float  # time.time() when the proxy received it
    phase: Phase

    @classmethod
    def of(cls, method: str, endpoint: str, body: bytes | bytearray, exchange: Exchange, phase: Phase
           ) -> DroppedRequest:
        return cls(request_id(body), method, endpoint, len(body), exchange.stream, exchange.profile, exchange.ts,
                   phase)

    def summary(self) -> str:
        received = time.strftime("%H:%M:%S", time.gmtime(self.received_at))
        shape = "streamed" if self.stream else "non-streamed"
        return (f"{self.request_id} ({self.method} {self.endpoint}, {self.body_bytes} bytes, {shape}, "
                f"received {received} UTC, dropped {self.phase})")


@dataclass(frozen=True)
class Crash:
    """The requests one crash of the backend dropped."""

    dropped: tuple[DroppedRequest, ...]

    def describe(self) -> str:
        profiles = sorted({d.profile for d in self.dropped if d.profile})
        server = f"llama-server (profile {', '.join(profiles)})" if profiles else "llama-server"
        how = (f"request id = first {ID_HEX_DIGITS} hex digits of the body's sha256; answered 502, not re-sent")
        if len(self.dropped) == 1:
            return (f"{server} went down right after taking request {self.dropped[0].summary()}: that request "
                    f"is the likely cause ({how})")
        listed = "; ".join(d.summary() for d in self.dropped)
        return (f"{server} went down with {len(self.dropped)} requests in flight, all dropped: {listed}; one of "
                f"them is the likely cause ({how})")


class CrashWatch:
    """The proxy's judge of a dropped request: did the server survive it? If not, name the request.

    The drops of one crash are gathered for `gather_s`, then logged (the journal line) and passed to
    `on_crash` (the daemon's history event) as one `Crash`.
    """

    def __init__(self, server_answers: Callable[[], Awaitable[bool]], on_down: Callable[[], None],
                 on_crash: Callable[[Crash], None] | None, gather_s: float = GATHER_S) -> None:
        self._server_answers, self._on_down, self._on_crash = server_answers, on_down, on_crash
        self._gather_s = gather_s
        self._pending: list[DroppedRequest] | None = None

    async def survived(self, dropped: DroppedRequest) -> bool:
        """True when the server still answers /health; otherwise it went down on `dropped` (noted)."""
        if await self._server_answers():
            return True
        self._on_down()
        if self._pending is None:
            self._pending = []
            asyncio.get_running_loop().call_later(self._gather_s, self._flush)
        self._pending.append(dropped)
        return False

    def _flush(self) -> None:
        pending, self._pending = self._pending, None
        if pending:
            crash = Crash(tuple(pending))
            log.warning("%s", crash.describe())
            if self._on_crash is not None:
                self._on_crash(crash)
