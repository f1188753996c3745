"""The proxy's listening socket and its client connections, bounded like a server's.

File descriptors are what one local client could exhaust: about 1,000 idle connections used up
the daemon's 1,024 open files, and then every accept, every backend connection and the watchdog's
ping failed. So the number of client connections is capped below what the open-files limit leaves
(`connection_budget`: half of what is free, since each proxied request also holds a connection to
the backend), and at the cap the server does what nginx does when `worker_connections` run out:
it closes the oldest idle connections — those waiting for a request they have not begun to send —
to make room for the new one; when every connection is busy, the new one gets a 503 with
`Retry-After` and is closed. Should the process still meet EMFILE at accept (other parts of the
daemon hold descriptors too), uvloop's listener closes the connection it cannot take and goes on
accepting (libuv's "EMFILE trick"); nothing stops the server.

The sweep that enforces the connections' deadlines (specd.proxy.http1.server) runs here too; an
error in it is logged and the sweep goes on.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import os
import resource
import socket
import time
from collections.abc import Awaitable, Callable

from specd.proxy.http1.server import FrontConnection, FrontLimits, Handler

log = logging.getLogger("specd.proxy.proxy")

RESERVED_FILES = 64  # descriptors kept for the rest of the daemon: the database, journald, the status page
MIN_CONNECTIONS = 16
EVICT_BATCH = 32  # idle connections closed at once when the cap is reached (nginx drains 32)
WARN_EVERY_S = 60.0


def connection_budget(reserved: int = RESERVED_FILES) -> int:
    """How many client connections fit in what the open-files limit leaves free now: half of it,
    for each proxied request also holds a connection to the backend."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        in_use = len(os.listdir("/proc/self/fd"))
    except OSError:
        in_use = reserved
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(MIN_CONNECTIONS, (soft - in_use - reserved) // 2)


class FrontServer:
    """The proxy's listening socket and its connections, with uvicorn's lifecycle surface
    (`serve`, `started`, `should_exit`) so the daemon runs it beside its other servers.
    `max_connections`: the cap on open client connections (None: `connection_budget()` at start)."""

    def __init__(self, handler: Handler, limits: FrontLimits, *, grace_s: float,
                 on_stop: Callable[[], Awaitable[None]], max_connections: int | None = None) -> None:
        self._handler, self._limits, self._grace_s = handler, limits, grace_s
        self._on_stop = on_stop
        self._connections: set[FrontConnection] = set()
        self.max_connections = max_connections
        self._next_sweep = 0.0
        self._warned_at = -WARN_EVERY_S
        self.evicted = 0  # idle connections closed to make room
        self.started = False
        self.should_exit = False

    @property
    def open_connections(self) -> int:
        return len(self._connections)

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        """Serve on `sockets`' one listening socket (specd.daemon.service.bind_tcp makes it) until
        `should_exit`; None is uvicorn's spelling of "no socket given", which a proxy always has."""
        if not sockets:
            raise ValueError("the proxy's server needs its listening socket (bind_tcp)")
        loop = asyncio.get_running_loop()
        if self.max_connections is None:
            self.max_connections = connection_budget()
        server = await loop.create_server(self._connection, sock=sockets[0], backlog=511)
        self.started = True
        sweep_s = min(self._limits.header_timeout_s, self._limits.body_timeout_s, 4.0) / 4
        try:
            while not self.should_exit:  # uvicorn's way: a flag other threads may set
                await asyncio.sleep(min(0.1, sweep_s))
                now = loop.time()
                if now >= self._next_sweep:
                    self._next_sweep = now + sweep_s
                    self._sweep(now)
        finally:
            server.close()
            await self._close_connections()
            await self._on_stop()

    def _sweep(self, now: float) -> None:
        for connection in list(self._connections):
            try:
                connection.enforce_deadlines(now)
            except Exception:  # one connection's bug must not end the sweep, or the server
                log.exception("proxy error enforcing a connection's deadlines")
                connection.close()

    # ---- admission (FrontConnection asks as it opens, tells as it closes) -------------------------

    def admit(self, connection: FrontConnection) -> bool:
        """Take `connection`, closing idle ones to make room at the cap; False: all busy, refuse it."""
        cap = self.max_connections or MIN_CONNECTIONS
        if len(self._connections) >= cap:
            self._evict_idle(len(self._connections) - cap + 1)
            if len(self._connections) >= cap:
                self._warn(f"{len(self._connections)} client connections open (the limit), all busy: "
                           "a new one was answered 503")
                return False
        self._connections.add(connection)
        return True

    def discard(self, connection: FrontConnection) -> None:
        self._connections.discard(connection)

    def _evict_idle(self, needed: int) -> None:
        idle = [(since, c) for c in self._connections if (since := c.idle_since) is not None]
        oldest = heapq.nsmallest(max(needed, EVICT_BATCH), idle, key=lambda pair: pair[0])
        for _, connection in oldest:
            self._connections.discard(connection)  # now: its connection_lost comes a loop turn later
            connection.close()
        self.evicted += len(oldest)
        if oldest:
            self._warn(f"{self.max_connections} client connections open (the limit): closed {len(oldest)} idle "
                       "one(s) to make room")

    def _warn(self, message: str) -> None:
        now = time.monotonic()
        if now - self._warned_at >= WARN_EVERY_S:
            self._warned_at = now
            log.warning("%s (at most one such line a minute)", message)

    def _connection(self) -> FrontConnection:
        return FrontConnection(self._handler, self._limits, self)

    async def _close_connections(self) -> None:
        """Idle connections close now; busy ones when their answer ends, within the grace."""
        deadline = asyncio.get_running_loop().time() + self._grace_s
        while self._connections and asyncio.get_running_loop().time() < deadline:
            for connection in list(self._connections):
                if not connection.busy:
                    connection.keep_alive = False
                    connection.close()
            await asyncio.sleep(0.05)
        for connection in list(self._connections):
            connection.close()
