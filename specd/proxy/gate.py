"""The proxy's gate: requests pass while the backend is healthy and no switch holds them.

Two things close it. A *pause*: a switch is about to restart the backend, so new requests wait
rather than being cut; a pause is a lease that ends by itself unless its owner renews it, so a
switch that is killed (`kill -9`, a lost SSH session) holds clients for at most one lease. And
*unhealthy*: the backend dropped a connection or is restarting; a poller reopens the gate once
the backend answers `/health` again. Held requests wait up to the proxy's hold timeout.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specd.proxy.metrics import ProxyMetrics


class HoldExpired(Exception):
    """A request waited at the gate for the whole hold timeout."""


class BackendGate:
    def __init__(self, probe: Callable[[], Awaitable[bool]], *, poll_s: float) -> None:
        self._probe = probe  # one /health check of the (possibly new) backend
        self._poll_s = poll_s
        self._open = asyncio.Event()
        self._open.set()
        self._unhealthy = False
        self._paused_until: float | None = None
        self._lease_timer: asyncio.TimerHandle | None = None
        self._poller: asyncio.Task[None] | None = None
        self.closing = False  # the proxy shuts down: everything held is let go (to a 503)

    @property
    def paused(self) -> bool:
        return self._paused_until is not None

    @property
    def healthy(self) -> bool:
        return not self._unhealthy

    @property
    def open(self) -> bool:
        """A request would pass right now (`wait` returns at once)."""
        return self._open.is_set()

    def _update(self) -> None:
        if self.closing or (self._paused_until is None and not self._unhealthy):
            self._open.set()
        else:
            self._open.clear()

    def pause(self, lease_s: float) -> None:
        """Hold new requests for `lease_s` (a switch is about to restart the backend), or until resume."""
        self._paused_until = time.monotonic() + lease_s
        if self._lease_timer is not None:
            self._lease_timer.cancel()
        self._lease_timer = asyncio.get_running_loop().call_later(lease_s, self.resume)
        self._update()

    def renew(self, lease_s: float) -> bool:
        """Extend a pause that is still on; False when it already ended (resumed or expired)."""
        if self._paused_until is None:
            return False
        self.pause(lease_s)
        return True

    def resume(self) -> None:
        """End a pause; held requests go once the (possibly new) backend answers /health."""
        if self._lease_timer is not None:
            self._lease_timer.cancel()
            self._lease_timer = None
        self._paused_until = None
        self.mark_unhealthy()

    def mark_unhealthy(self) -> None:
        self._unhealthy = True
        self._update()
        if self._poller is None or self._poller.done():
            self._poller = asyncio.get_running_loop().create_task(self._poll())

    def close(self) -> None:
        self.closing = True
        self._update()

    def stop(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
        if self._lease_timer is not None:
            self._lease_timer.cancel()

    async def _poll(self) -> None:
        while self._unhealthy and not self.closing:
            if await self._probe():
                self._unhealthy = False
                self._update()
                return
            await asyncio.sleep(self._poll_s)

    async def wait(self, deadline: float, hold_timeout_s: float) -> None:
        """Return once the gate is open; raise HoldExpired at `deadline` (time.perf_counter())."""
        while not self._open.is_set():
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                raise HoldExpired(f"backend not healthy after {hold_timeout_s:g} s")
            try:
                await asyncio.wait_for(self._open.wait(), remaining)
            except TimeoutError:
                continue

    async def pass_through(self, deadline: float, hold_timeout_s: float, metrics: ProxyMetrics | None) -> None:
        """`wait`, counted in the proxy's metrics: how long each request was held, and how many are now."""
        if self._open.is_set():  # the usual case: no wait, no gauge to move
            if metrics is not None:
                metrics.hold.observe(0.0)
            return
        held_since = time.perf_counter()
        if metrics is not None:
            metrics.held_now.inc()
        try:
            await self.wait(deadline, hold_timeout_s)
        finally:
            if metrics is not None:
                metrics.held_now.dec()
                metrics.hold.observe(time.perf_counter() - held_since)
