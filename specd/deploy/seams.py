"""The seams one deployment's operations run over: where its state lives, its history, the
service manager, HTTP, GPU access, the clock and the daemon's proxy (its drain around a restart,
its retarget after a blue-green flip).

`specd.context` (the composition root) builds the real ones once and passes them down; nothing
below it reaches for a global path, opens its own database or connects its own bus. Tests build
one over a tmp dir and fakes (`Seams(..., connect=lambda: FakeSystemdClient())`).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Protocol

import httpx

from specd.clock import SYSTEM_CLOCK, Clock
from specd.deploy.history import History
from specd.deploy.lock import deployment_lock
from specd.deploy.priority import ProcessPriority, UnchangedPriority
from specd.deploy.slots import Slot, serving_slot
from specd.deploy.systemd import SystemdClient
from specd.deploy.unitfiles import ContentStore
from specd.endpoint import http_client
from specd.gpu.nvml import Nvml
from specd.paths import StateDir
from specd.profiles.config import Deployment

HttpFactory = Callable[[float], httpx.Client]  # timeout_s -> a client the caller closes


def default_http(timeout_s: float) -> httpx.Client:
    return http_client(httpx.Timeout(timeout_s, connect=min(2.0, timeout_s)))


class ProxyLink(Protocol):
    """The daemon's proxy as a switch sees it (`specd.daemon.control.DaemonProxyLink`)."""

    def serving(self, unit: str) -> bool:
        """Does a running daemon proxy clients to this deployment?"""
        ...

    def retarget(self, unit: str) -> bool | None:
        """Make the proxy send new requests to the slot the pointer names now (streams in flight stay
        where they are). True once it does, False when it did not within its timeout, None: no daemon."""
        ...

    def drained(self, unit: str) -> AbstractContextManager[object]:
        """The drain around a restart or stop of `unit`: new requests wait at the proxy's gate and the
        block begins once those in flight finished (or a timeout passed); traffic resumes when it
        ends, whatever happened inside. A unit the proxy sends nothing to (a slot that does not serve)
        is not held; with no daemon it is a plain block."""
        ...

    def reroute(self, unit: str, timeout_s: float) -> bool | None:
        """Make the proxy re-read the routing state (specd.routing.state) and wait until nothing is in
        flight to a companion it no longer routes to. True once it does, False when requests were still in
        flight at the timeout, None: no daemon."""
        ...


class NoProxy:
    """No daemon to tell: clients reach the server's own port."""

    def serving(self, unit: str) -> bool:
        return False

    def retarget(self, unit: str) -> bool | None:
        return None

    def drained(self, unit: str) -> AbstractContextManager[object]:
        return nullcontext()

    def reroute(self, unit: str, timeout_s: float) -> bool | None:
        return None


@dataclass
class Seams:
    deployment: Deployment
    state: StateDir
    history: History
    connect: Callable[[], SystemdClient]  # called on first use: read-only callers may never need the bus
    clock: Clock = SYSTEM_CLOCK
    http: HttpFactory = default_http
    nvml: Nvml | None = None  # None: pynvml, when the box has an NVIDIA driver
    proxy: ProxyLink = field(default_factory=NoProxy)
    priority: ProcessPriority = field(default_factory=UnchangedPriority)  # a loading server's CPU share
    _systemd: SystemdClient | None = field(default=None, repr=False)

    @property
    def unit(self) -> str:
        return self.deployment.unit

    @property
    def systemd(self) -> SystemdClient:
        if self._systemd is None:
            self._systemd = self.connect()
        return self._systemd

    def serving(self) -> Slot:
        """The slot whose server the alias endpoint is (read fresh: a switch in another process moves it)."""
        return serving_slot(self.state, self.deployment)

    @property
    def units(self) -> ContentStore:
        """Every unit text installed or seen for this deployment, by hash."""
        return ContentStore(self.state.unit_store(self.deployment.name))

    def lock(self, what: str, timeout_s: float | None = None) -> AbstractContextManager[None]:
        """The deployment's lock (one mutating operation at a time, across processes)."""
        return deployment_lock(self.state.lock(self.unit), self.unit, what,
                               timeout_s=self.deployment.lock_timeout_s if timeout_s is None else timeout_s,
                               clock=self.clock)

    def close(self) -> None:
        self.history.close()


SeamsFactory = Callable[[Deployment], Seams]
"""specd.context.seams_for: builds a deployment's real seams; one set per thread that uses them."""
