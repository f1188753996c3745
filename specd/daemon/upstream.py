"""The proxy's connections to the backend: pooled keep-alive connections through aiohttp.

Every proxied request pays for this client, so it is aiohttp (llhttp's C parser; request headers
and body leave in one write) on connections kept alive between requests, rather than httpx,
whose pure-Python HTTP/1.1 stack cost the proxy about 2.5 times the CPU per request
(benchmarks/results/proxy-overhead.md). Requests go out as the client sent them: method, raw path
and query, headers except hop-by-hop ones, body; no redirects followed, no decompression (the
relay reads token events in the bytes), nothing added but Host and Content-Length.

`send` turns what went wrong into a `resend.Outcome`, so the re-send rule never sees a library's
exception classes.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import aiohttp
from yarl import URL

from specd.daemon.resend import Outcome

HOP_BY_HOP = frozenset({
    b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"te", b"trailer",
    b"transfer-encoding", b"upgrade", b"host", b"content-length", b"accept-encoding",
})
_NOT_RELAYED = HOP_BY_HOP | {b"date"}
CONNECT_TIMEOUT_S = 2.0
HEALTH_TIMEOUT_S = 2.0
# aiohttp adds these unless told not to; a pass-through sends only what the client sent.
_NOT_ADDED = frozenset({"User-Agent", "Accept", "Content-Type"})


class UpstreamFailed(Exception):
    """One attempt to reach the backend failed before a status line came back."""

    def __init__(self, outcome: Outcome, cause: BaseException) -> None:
        super().__init__(f"{outcome}: {type(cause).__name__}")
        self.outcome: Outcome = outcome
        self.cause_name = type(cause).__name__


def outcome_of(exc: BaseException) -> Outcome:
    """What an exception raised while sending (before any status line) says about the request."""
    if isinstance(exc, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError):
        return "never-reached"  # refused, or no connection within the connect timeout
    if isinstance(exc, aiohttp.ServerTimeoutError | TimeoutError):
        return "timed-out"
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientConnectionResetError
                  | aiohttp.ClientOSError):
        return "dropped"  # accepted, then closed or reset before a status line
    return "failed"


def forwarded_headers(raw: Iterable[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    """The client's headers minus hop-by-hop ones; the body is asked for uncompressed."""
    headers = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in raw
               if name.lower() not in HOP_BY_HOP]
    headers.append(("accept-encoding", "identity"))
    return headers


def response_headers(raw: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The backend's headers as they go to the client: hop-by-hop ones are the proxy's own business,
    and the server (uvicorn) adds its own Date."""
    return [(name, value) for name, value in raw if name.lower() not in _NOT_RELAYED]


@functools.cache
def _timeout(read_timeout_s: float | None) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S, sock_read=read_timeout_s)


class Upstream:
    """A pool of keep-alive connections to whichever backend the proxy names per request."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=30.0),
            auto_decompress=False, skip_auto_headers=_NOT_ADDED, cookie_jar=aiohttp.DummyCookieJar(),
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def send(self, method: str, url: str, headers: list[tuple[str, str]], body: bytes,
                   read_timeout_s: float | None) -> aiohttp.ClientResponse:
        """The backend's response, its headers read and its body not yet; UpstreamFailed otherwise.

        `read_timeout_s` bounds each wait for bytes (the status line, then every read of the
        body): a backend that goes silent that long is hung.
        """
        assert self._session is not None, "Upstream.start() first"
        try:
            return await self._session.request(method, URL(url, encoded=True), headers=headers, data=body or None,
                                               allow_redirects=False, timeout=_timeout(read_timeout_s))
        except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
            raise UpstreamFailed(outcome_of(exc), exc) from exc

    async def healthy(self, base_url: str) -> bool:
        """/health answers 200, on a pooled connection (the gate's poll)."""
        assert self._session is not None, "Upstream.start() first"
        try:
            async with self._session.get(f"{base_url}/health",
                                         timeout=aiohttp.ClientTimeout(total=HEALTH_TIMEOUT_S)) as response:
                await response.read()
                return response.status == 200
        except (TimeoutError, aiohttp.ClientError, ValueError):
            return False


async def answers_health_now(base_url: str) -> bool:
    """One quick /health probe on a fresh connection: is the server that dropped us still up?"""
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1.0)) as probe, \
                probe.get(f"{base_url}/health") as response:
            return response.status == 200
    except (TimeoutError, aiohttp.ClientError, ValueError):
        return False
