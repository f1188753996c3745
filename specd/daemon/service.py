"""Running as a service: HTTP servers that leave signals to the daemon, sockets, sd_notify.

uvicorn installs its own SIGTERM handler and re-raises the signal after shutdown; the daemon runs
several servers and stops them in a chosen order, so `QuietServer` leaves signals alone.
Every request pays the proxy's own cost, so the servers parse HTTP with httptools (C, llhttp)
on a uvloop event loop (`new_event_loop`), not h11 on asyncio's pure-Python selector loop
(benchmarks/results/proxy-overhead.md).
`notify` is sd_notify(3) without libsystemd: `Type=notify` readiness and `WatchdogSec=` pings.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import uvicorn
import uvloop
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from specd.errors import ConfigError

log = logging.getLogger(__name__)


class QuietServer(uvicorn.Server):
    """uvicorn without its own signal handlers: the daemon owns SIGTERM and stops servers in order."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


HEADER_TIMEOUT_S = 30.0


def new_event_loop() -> asyncio.AbstractEventLoop:
    """The loop the daemon (and every test server of the proxy) runs on: uvloop."""
    return uvloop.new_event_loop()


class HeadersWithBody:
    """A connection's transport whose response headers leave with the first body bytes.

    uvicorn writes a response's status line and headers as soon as the app starts the response,
    then each body part: two sends, two packets and two wake-ups of the client where one does.
    Here a write that starts with a status line is held until the next write (sent together) or
    the end of this turn of the event loop (sent alone), whichever comes first, so order is kept
    and nothing waits longer than one turn. Everything else is the real transport's.
    """

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport, self._loop = transport, loop
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        if self._held is not None:
            data, self._held = self._held + data, None
        elif data.startswith(b"HTTP/1.1 "):
            self._held = data
            self._loop.call_soon(self._release)
            return
        self._transport.write(data)

    def _release(self) -> None:
        if self._held is not None:
            held, self._held = self._held, None
            if not self._transport.is_closing():  # a client that left gets nothing more
                self._transport.write(held)

    def close(self) -> None:
        self._release()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class _RequestDeadlineProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline for a request's headers (slowloris), whose
    responses' headers leave with their first body bytes (`HeadersWithBody`).

    uvicorn times out only idle keep-alive connections, and only until their first byte: a client
    that connects and never completes its headers (or sends one byte a minute) keeps a socket and
    a file descriptor forever. Here a connection waiting for a request is closed once
    `header_timeout_s` passed since it connected or since its last response ended.
    """

    header_timeout_s = HEADER_TIMEOUT_S

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.transport = HeadersWithBody(transport, self.loop)  # type: ignore[assignment]
        self._deadline: asyncio.TimerHandle | None = None
        self._arm_request_deadline()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm_request_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        super().connection_lost(exc)

    def _arm_request_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = self.loop.call_later(self.header_timeout_s, self._request_deadline)

    def _request_deadline(self) -> None:
        waiting = self.cycle is None or self.cycle.response_complete
        if waiting and not self.transport.is_closing():
            self.transport.close()


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def make_server(app: Any, *, host: str | None = None, port: int = 0, uds: Path | None = None,
                grace_s: float = 30.0, header_timeout_s: float = HEADER_TIMEOUT_S) -> QuietServer:
    """An HTTP server on loopback (or a unix socket); warns when told to listen further out."""
    if uds is None and host is not None and not is_loopback(host):
        log.warning("specd proxy listens on %s:%d, reachable from other machines; clients' API keys pass "
                    "through it in clear text", host, port)
    config = uvicorn.Config(
        app, host=host or "127.0.0.1", port=port, uds=str(uds) if uds else None, log_config=None,
        access_log=False, lifespan="on", timeout_graceful_shutdown=int(grace_s) + 1, server_header=False,
        timeout_keep_alive=30, interface="asgi3", proxy_headers=False,  # X-Forwarded-* pass through, unread
        http=type("RequestDeadlineProtocol", (_RequestDeadlineProtocol,), {"header_timeout_s": header_timeout_s}),
    )
    return QuietServer(config)


def bind_tcp(host: str, port: int, setting: str = "[proxy] listen") -> socket.socket:
    """Bind the proxy's socket here, so a taken port is a clear error and not uvicorn's sys.exit."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP: asyncio sets TCP_NODELAY on accepted sockets only when it sees it; without
    # it Nagle meets delayed ACKs and every proxied response stalls 40 ms.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"{setting} {host}:{port}: {exc.strerror}",
                          hint="another program (or another specd daemon) uses that port") from exc
    return sock


def notify(message: str) -> bool:
    """sd_notify(3) without libsystemd: one datagram to $NOTIFY_SOCKET; False when not under systemd."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
        try:
            sock.connect(address)
            sock.sendall(message.encode())
        except OSError as exc:
            log.warning("cannot notify systemd at %s: %s", address, exc)
            return False
    return True


def watchdog_interval_s() -> float | None:
    usec, pid = os.environ.get("WATCHDOG_USEC"), os.environ.get("WATCHDOG_PID")
    if not usec or not usec.isdigit() or (pid and pid.isdigit() and int(pid) != os.getpid()):
        return None
    return int(usec) / 1e6


async def keep_pinging(interval_s: float) -> None:
    while True:
        notify("WATCHDOG=1")
        await asyncio.sleep(interval_s)
