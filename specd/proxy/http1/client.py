"""The proxy's client: pooled keep-alive HTTP/1.1 connections to the backend, parsed by httptools.

Every proxied request pays for this client, so it is an asyncio protocol with httptools' response
parser (llhttp) and nothing else between the backend's bytes and the relay: the request leaves in
one write on a pooled connection, the status line resolves one future, and every body part after
it is handed to the consumer (`Sink`) from the protocol's own callback — no reader task, no
queue, no wake-up per token (benchmarks/results/proxy-overhead.md). Requests go out as the client
sent them: method, raw path and query, headers except hop-by-hop ones (the fixed list and those
the message's `Connection:` names, RFC 9110 §7.6.1), body; nothing followed or decompressed,
nothing added but Host, Content-Length and `Accept-Encoding: identity` (the relay reads token events
in the bytes). The same goes for the backend's headers on their way back. A response body is
delimited as RFC 9112 §6.3 says: by Content-Length, by chunks, or — with neither — by the backend
closing the connection, which then ends the body (it is not a drop); trailers are dropped.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

import httptools

from specd.proxy.http1 import Headers
from specd.proxy.http1.bodies import Body
from specd.proxy.http1.response import MalformedResponse, UpstreamFailed, UpstreamResponse

HOP_BY_HOP = frozenset({
    b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"te", b"trailer",
    b"transfer-encoding", b"upgrade", b"host", b"content-length", b"accept-encoding", b"expect",
})
CONNECT_TIMEOUT_S = 2.0
HEALTH_TIMEOUT_S = 2.0
IDLE_KEEP_S = 30.0  # a pooled connection idle longer is closed, not reused
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_SEPARATE_BODY_BYTES = 64 * 1024  # a bigger body is written after the head, not copied onto it


@dataclass(frozen=True)
class Origin:
    host: str
    port: int
    authority: bytes  # the Host header


@functools.lru_cache(maxsize=64)
def origin_of(base_url: str) -> Origin:
    """Where `http://host:port` is; ValueError for anything else."""
    parts = urlsplit(base_url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"the backend must be an http:// address, not {base_url!r}")
    return Origin(parts.hostname, parts.port or 80, parts.netloc.encode("latin-1"))


def hop_by_hop(raw: Headers) -> frozenset[bytes]:
    """The header names that stay on this hop: the fixed list, and any the message's `Connection:`
    header names (`Connection: close, x-secret` keeps `x-secret` off the next hop)."""
    named = [value for name, value in raw if name.lower() == b"connection"]
    if not named:
        return HOP_BY_HOP
    return HOP_BY_HOP | {token.strip().lower() for value in named for token in value.split(b",")}


def forwarded_headers(raw: Headers) -> bytes:
    """The header lines sent on to the backend: the client's minus hop-by-hop ones, and the body
    asked for uncompressed."""
    dropped = hop_by_hop(raw)
    return b"".join([name + b": " + value + b"\r\n" for name, value in raw if name.lower() not in dropped]
                    + [b"accept-encoding: identity\r\n"])


def response_headers(raw: Headers) -> Headers:
    """The backend's headers as they go to the client: hop-by-hop ones are the proxy's own business."""
    dropped = hop_by_hop(raw)
    return [(name, value) for name, value in raw if name.lower() not in dropped]


class BackendConnection(asyncio.Protocol):
    """One keep-alive connection to the backend; at most one response in flight."""

    def __init__(self, pool: UpstreamPool, origin: Origin) -> None:
        self.loop = asyncio.get_running_loop()
        self._pool, self.origin = pool, origin
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self.response: UpstreamResponse | None = None
        self.closed = False
        self.idle_since = 0.0
        self.served = 0  # responses read to their end on this connection

    def begin(self, request: bytes, body: Body, read_timeout_s: float | None, head_only: bool) -> UpstreamResponse:
        assert self._transport is not None and self.response is None
        self.response = UpstreamResponse(self, read_timeout_s, head_only, reused=self.served > 0)
        self._transport.write(request)
        if body:
            self._transport.write(body)
        return self.response

    def detach(self) -> None:
        """Give up on this connection: its response is abandoned, it is closed and never reused."""
        self.response = None
        self.close()

    def close(self) -> None:
        self.closed = True
        self._pool.forget(self)
        if self._transport is not None:
            self._transport.close()

    def pause_reading(self) -> None:
        if self._transport is not None and not self.closed:
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        if self._transport is not None and not self.closed:
            self._transport.resume_reading()

    # ---- asyncio ------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports are not its subclasses

    def data_received(self, data: bytes) -> None:
        response = self.response
        if response is None:  # bytes nobody asked for: the connection is out of step
            self.close()
            return
        response.last_read = self.loop.time()
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.detach()
            response.broke(MalformedResponse(f"malformed response from the backend: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._pool.forget(self)
        response, self.response = self.response, None
        if response is None:
            return
        if exc is None and response.close_delimited:  # the end of a body framed by the close itself
            response.complete()
            return
        response.broke(exc if isinstance(exc, OSError) else ConnectionResetError("the backend closed the connection"))

    # ---- httptools ----------------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.response is not None and self.response.status == 0:  # after the headers: a trailer, dropped
            self.response.headers.append((name, value))

    def on_headers_complete(self) -> None:
        response = self.response
        if response is None:
            return
        status = self._parser.get_status_code()
        if 100 <= status < 200:
            response.informational = True
            response.headers.clear()
            return
        response.close_delimited = not response.head_only and status not in (204, 304) and not any(
            name.lower() in (b"content-length", b"transfer-encoding") for name, _ in response.headers)
        response.headers_done(status)
        if response.head_only:  # no body follows, whatever Content-Length says
            self.detach()
            response.complete()

    def on_body(self, body: bytes) -> None:
        if self.response is not None:
            self.response.data(body)

    def on_message_complete(self) -> None:
        response = self.response
        if response is None:
            return
        if response.informational:
            response.informational = False
            return
        self.response = None
        self.served += 1
        keep_alive = self._parser.should_keep_alive()
        response.complete()
        if keep_alive and not self.closed:
            self._pool.release(self)
        else:
            self.close()


class UpstreamPool:
    """Keep-alive connections to whichever backend the proxy names per request."""

    def __init__(self) -> None:
        self._idle: dict[Origin, list[BackendConnection]] = {}
        self._open: set[BackendConnection] = set()

    def send_now(self, method: str, base_url: str, target: bytes, headers: bytes, body: Body
                 ) -> UpstreamResponse | None:
        """Send at once on an idle pooled connection, without waiting for anything; None when no
        connection is idle (or the address is not usable): `send` then. Await `started()` next."""
        try:
            origin = origin_of(base_url)
        except ValueError:
            return None
        connection = self._take(origin)
        if connection is None:
            return None
        return self._begin(connection, method, target, headers, body, None)

    async def send(self, method: str, base_url: str, target: bytes, headers: bytes, body: Body,
                   read_timeout_s: float | None,
                   on_status: Callable[[UpstreamResponse], None] | None = None, *,
                   fresh: bool = False) -> UpstreamResponse:
        """The backend's response, its headers read and its body not yet; UpstreamFailed otherwise.
        `headers` are the header lines to send (`forwarded_headers`), Host and Content-Length aside;
        `on_status` becomes the response's hook at its status line (`UpstreamResponse.on_status`).

        `read_timeout_s` bounds each wait for bytes (the status line, then every part of the body):
        a backend that goes silent that long is hung. `fresh`: on a new connection, never a pooled one
        (the re-send rule's re-send after a drop on a reused connection, specd.proxy.resend).
        """
        try:
            origin = origin_of(base_url)
        except ValueError as exc:
            raise UpstreamFailed("failed", exc) from exc
        connection = (None if fresh else self._take(origin)) or await self._connect(origin)
        response = self._begin(connection, method, target, headers, body, read_timeout_s)
        response.on_status = on_status
        await response.started()
        return response

    @staticmethod
    def _begin(connection: BackendConnection, method: str, target: bytes, headers: bytes, body: Body,
               read_timeout_s: float | None) -> UpstreamResponse:
        length = b"content-length: %d\r\n" % len(body) if body or method in _BODY_METHODS else b""
        request = b"%b %b HTTP/1.1\r\nhost: %b\r\n%b%b\r\n" % (method.encode("ascii"), target,
                                                               connection.origin.authority, headers, length)
        if len(body) <= _SEPARATE_BODY_BYTES:
            request, body = request + body, b""
        return connection.begin(request, body, read_timeout_s, method == "HEAD")

    async def healthy(self, base_url: str, timeout_s: float = HEALTH_TIMEOUT_S) -> bool:
        """/health answers 200 within `timeout_s`."""
        try:
            async with asyncio.timeout(timeout_s):
                response = await self.send("GET", base_url, b"/health", b"", b"", timeout_s)
                await response.read()
                return response.status == 200
        except (UpstreamFailed, TimeoutError, OSError):
            return False

    def discard_idle(self, base_url: str) -> None:
        """Close the idle connections to `base_url`: the server may have closed them all (a restart)."""
        try:
            origin = origin_of(base_url)
        except ValueError:
            return
        for connection in self._idle.pop(origin, []):
            connection.close()

    def close(self) -> None:
        for connection in list(self._open):
            connection.close()
        self._idle.clear()

    # ---- the pool -----------------------------------------------------------------------------

    def _take(self, origin: Origin) -> BackendConnection | None:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            connection = idle.pop()
            if not connection.closed and now - connection.idle_since < IDLE_KEEP_S:
                return connection
            connection.close()
        return None

    async def _connect(self, origin: Origin) -> BackendConnection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                _, connection = await loop.create_connection(lambda: BackendConnection(self, origin), origin.host,
                                                             origin.port)
        except (OSError, TimeoutError) as exc:
            raise UpstreamFailed("never-reached", exc) from exc  # refused, or no connection in time
        self._open.add(connection)
        return connection

    def release(self, connection: BackendConnection) -> None:
        connection.idle_since = time.monotonic()
        self._idle.setdefault(connection.origin, []).append(connection)

    def forget(self, connection: BackendConnection) -> None:
        self._open.discard(connection)
        idle = self._idle.get(connection.origin)
        if idle and connection in idle:
            idle.remove(connection)


async def answers_health_now(base_url: str) -> bool:
    """One quick /health probe on a fresh connection: is the server that dropped us still up?"""
    pool = UpstreamPool()
    try:
        return await pool.healthy(base_url, timeout_s=1.0)
    finally:
        pool.close()
