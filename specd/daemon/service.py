"""Running as a service: HTTP servers that leave signals to the daemon, sockets, sd_notify.

The control socket, the status page and the metrics listener are ASGI apps under uvicorn; the
proxy, which every client request goes through, has its own lean server (specd.proxy.http1).
uvicorn installs its own SIGTERM handler and re-raises the signal after shutdown; the daemon runs
several servers and stops them in a chosen order, so `QuietServer` leaves signals alone. Every
server runs on a uvloop event loop (`new_event_loop`), uvicorn's with httptools (C, llhttp), not
h11 on asyncio's pure-Python selector loop.
`notify` is sd_notify(3) without libsystemd: `Type=notify` readiness and `WatchdogSec=` pings,
sent on one socket opened at the first message and kept, so a ping needs no new file descriptor
(with the open-files limit used up, opening one per ping raised EMFILE and ended the daemon); a
failed ping is logged, never raised. `raise_open_files_limit` lifts the soft limit to the hard one
at start, as systemd advises for programs that do not use select().
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ipaddress
import logging
import os
import resource
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import uvicorn
import uvloop
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from specd.errors import ConfigError

log = logging.getLogger(__name__)


class Server(Protocol):
    """What the daemon needs of any of its servers: uvicorn's (`QuietServer`) or the proxy's."""

    started: bool
    should_exit: bool

    async def serve(self, sockets: list[socket.socket] | None = None) -> None: ...


class QuietServer(uvicorn.Server):
    """uvicorn without its own signal handlers: the daemon owns SIGTERM and stops servers in order."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


HEADER_TIMEOUT_S = 30.0


def new_event_loop() -> asyncio.AbstractEventLoop:
    """The loop the daemon (and every test server of the proxy) runs on: uvloop."""
    return uvloop.new_event_loop()


class _RequestDeadlineProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline for a request's headers (slowloris).

    uvicorn times out only idle keep-alive connections, and only until their first byte: a client
    that connects and never completes its headers (or sends one byte a minute) keeps a socket and
    a file descriptor forever. Here a connection waiting for a request is closed once
    `header_timeout_s` passed since it connected or since its last response ended.
    """

    header_timeout_s = HEADER_TIMEOUT_S

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
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
    """An HTTP server for an ASGI app on loopback (or a unix socket)."""
    config = uvicorn.Config(
        app, host=host or "127.0.0.1", port=port, uds=str(uds) if uds else None, log_config=None,
        access_log=False, lifespan="on", timeout_graceful_shutdown=int(grace_s) + 1, server_header=False,
        timeout_keep_alive=30, interface="asgi3", proxy_headers=False,  # X-Forwarded-* pass through, unread
        http=type("RequestDeadlineProtocol", (_RequestDeadlineProtocol,), {"header_timeout_s": header_timeout_s}),
    )
    return QuietServer(config)


def bind_tcp(host: str, port: int, setting: str = "[proxy] listen") -> socket.socket:
    """Bind a server's socket here, so a taken port is a clear error and not uvicorn's sys.exit; warn
    when it is reachable from other machines."""
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
    if not is_loopback(host):
        log.warning("specd listens on %s:%d (%s), reachable from other machines; what clients send, API keys "
                    "included, passes in clear text", host, port, setting)
    return sock


_notify_socket: socket.socket | None = None
_notify_warned_at = -60.0


def notify(message: str) -> bool:
    """sd_notify(3) without libsystemd: one datagram to $NOTIFY_SOCKET; False when not under systemd
    or when it could not be sent (logged at most once a minute; never raised)."""
    global _notify_socket, _notify_warned_at
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    try:
        if _notify_socket is None:
            _notify_socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            atexit.register(_notify_socket.close)  # kept for the process's life, closed at its end
        _notify_socket.sendto(message.encode(), address)
    except OSError as exc:
        if time.monotonic() - _notify_warned_at >= 60.0:
            _notify_warned_at = time.monotonic()
            log.warning("cannot notify systemd at %s: %s", address, exc)
        return False
    return True


def raise_open_files_limit() -> tuple[int, int]:
    """Lift the soft open-files limit to the hard one (the unit's `LimitNOFILE=`); (soft, hard) after.
    The default soft limit, 1,024, is what one client's idle connections used up."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open-files limit from %d to %d: %s", soft, target, exc)
    return soft, hard


def watchdog_interval_s() -> float | None:
    usec, pid = os.environ.get("WATCHDOG_USEC"), os.environ.get("WATCHDOG_PID")
    if not usec or not usec.isdigit() or (pid and pid.isdigit() and int(pid) != os.getpid()):
        return None
    return int(usec) / 1e6


async def keep_pinging(interval_s: float) -> None:
    while True:
        notify("WATCHDOG=1")  # never raises
        await asyncio.sleep(interval_s)
