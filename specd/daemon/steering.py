"""The control socket's work on the proxies: drain around a restart, and the blue-green retarget.

A deployment has two slots (specd.deploy.slots); the proxy sends to the one the slot pointer
names. A drain asked for a slot's unit pauses the proxy only when that slot serves: restarting or
stopping the other slot (a blue-green switch's new or old server, a shadow bench's candidate)
cuts nothing the proxy sends. A retarget is the blue-green flip: the pointer already moved; the
proxy's backend follows in one assignment, after the new server's prompt cache is warmed with the
latest requests (`specd.proxy.warmup`) and a /health of it, both off the request path.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

import httpx

from specd.deploy.slots import Slot, serving_slot, slot_of_unit
from specd.deploy.unitfiles import read_text
from specd.endpoint import socket_of
from specd.errors import ConfigError, SpecdError
from specd.paths import StateDir
from specd.profiles.config import Deployment
from specd.proxy.proxy import Proxy
from specd.proxy.routes import Companion, RouteSet
from specd.proxy.settings import Backend
from specd.proxy.warmup import Warmed, warm_up
from specd.routing.state import read_state
from specd.unit.parse import parse_unit
from specd.unit.render import profile_of_unit

log = logging.getLogger(__name__)

NO_BACKEND = Backend("http://127.0.0.1:9", None)  # nothing listens on discard: requests are held


def _said(warmed: Warmed | None) -> str | None:
    return None if warmed is None else warmed.describe()


def backend_of(deployment: Deployment, state: StateDir, *, refuse_socket: bool = False) -> Backend:
    """The proxy's backend: the server of the slot that serves (read fresh: a switch moves it). A server on
    a Unix socket is none the proxy can reach (its upstream is TCP; preflight refuses such a profile with a
    [proxy]): requests are held as with no server, and `refuse_socket` (the daemon's start) refuses it."""
    serving = serving_slot(state, deployment)
    text = read_text(serving.unit_path)
    if text is None:
        return NO_BACKEND
    try:
        command = parse_unit(text, str(serving.unit_path))
    except SpecdError:
        return NO_BACKEND
    socket = socket_of(command.base_url)
    if socket is not None and refuse_socket:
        raise ConfigError(f"[proxy] of {deployment.unit}: its server listens on the Unix socket {socket}, and the "
                          "proxy forwards to a TCP port only", hint="switch it to a profile with a TCP host and port, "
                                                                    "or drop [proxy] (clients use the socket)")
    return NO_BACKEND if socket is not None else Backend(command.base_url, profile_of_unit(text), command.api_key)


def routes_of(deployment: Deployment, state: StateDir) -> RouteSet:
    """What the proxy routes over: the routing state's companions (their address read from their unit
    files, as the primary's is), the table, per-request stamps; routing off is an empty set."""
    routing = read_state(state, deployment.unit)
    settings = deployment.routing
    if not routing.on:
        return RouteSet(busy_at=settings.busy_at, sticky_s=settings.sticky_s)
    companions = []
    for resident in routing.residents:
        path = deployment.unit_dir / resident.unit
        text = read_text(path)
        if text is None:
            continue
        try:
            command = parse_unit(text, str(path))
        except SpecdError:
            continue
        companions.append(Companion(command.base_url, resident.profile, command.api_key))
    stamps = routing.stamps if routing.mode == "per-request" else {}
    return RouteSet(True, tuple(companions), routing.table, stamps, settings.busy_at, settings.sticky_s)


async def refresh_routes(proxies: Mapping[str, Proxy | None]) -> None:
    """Each heartbeat the routers re-read the routing state (by unit): a `route on` whose call to the
    control socket never came (the CLI was killed after writing it) still takes effect within a beat."""
    for unit, proxy in proxies.items():
        if proxy is not None and proxy.router is not None:
            try:
                await proxy.router.refresh()
            except Exception:  # a routing state that cannot be read leaves the routes as they were
                log.exception("%s: cannot re-read the routing state", unit)


class ProxySteering:
    """Drain, renew, resume and retarget for the daemon's proxies, keyed by deployment unit."""

    def __init__(self, state: StateDir, proxies: Mapping[str, tuple[Deployment, Proxy]]) -> None:
        self.state = state
        self.proxies = dict(proxies)

    def _proxied(self, unit: str) -> tuple[Deployment, Proxy, Slot] | None:
        """The deployment whose slot `unit` is (its own unit or the green companion), with its proxy."""
        for deployment, proxy in self.proxies.values():
            found = slot_of_unit(deployment, unit)
            if found is not None:
                return deployment, proxy, found
        return None

    def _serves(self, deployment: Deployment, unit_slot: Slot) -> bool:
        return serving_slot(self.state, deployment).name == unit_slot.name

    async def drain(self, unit: str, timeout_s: float, lease_s: float) -> dict[str, Any] | None:
        found = self._proxied(unit)
        if found is None:
            return None
        deployment, proxy, unit_slot = found
        if not self._serves(deployment, unit_slot):  # the proxy sends it nothing: nothing to hold or wait for
            return {"unit": unit, "drained": True, "active": 0, "in_flight": proxy.in_flight, "serving": False}
        proxy.pause(lease_s)  # renewed by the switch while it runs; ends by itself if the switch dies
        drained = await proxy.wait_idle(timeout_s)
        return {"unit": unit, "drained": drained, "active": proxy.active, "in_flight": proxy.in_flight}

    def renew(self, unit: str, lease_s: float) -> dict[str, Any] | None:
        found = self._proxied(unit)
        if found is None:
            return None
        return {"unit": unit, "renewed": found[1].renew(lease_s)}

    def resume(self, unit: str) -> dict[str, Any] | None:
        found = self._proxied(unit)
        if found is None:
            return None
        deployment, proxy, unit_slot = found
        if self._serves(deployment, unit_slot):  # a drain of a slot that does not serve paused nothing
            proxy.resume()
        return {"unit": unit, "resumed": True}

    async def reroute(self, unit: str, timeout_s: float) -> dict[str, Any] | None:
        """`specd route on/off` (or a new table) changed the routing state: the proxy re-reads it, and the
        answer comes once nothing is in flight to a companion it no longer routes to (route off may then
        stop it without cutting a request)."""
        if unit not in self.proxies:
            return None
        _, proxy = self.proxies[unit]
        if proxy.router is None:
            return None
        before = {c.url for c in proxy.router.routes.companions}
        routes = await proxy.router.refresh()
        removed = before - {c.url for c in routes.companions}
        idle = await proxy.router.wait_idle(removed, timeout_s)
        return {"unit": unit, "rerouted": True, "idle": idle, "removed": sorted(removed),
                "routing": proxy.router.status()}

    async def retarget(self, unit: str, timeout_s: float) -> dict[str, Any] | None:
        """A blue-green flip: the proxy's next request goes to the slot the pointer names now.

        The new server passed the switch's health gate; one more /health here, off the request path,
        then the backend is replaced in one assignment on the event loop: no request waits, and
        streams in flight keep their connection to the old server. If the new server does not
        answer, the proxy's gate takes over (it holds requests until the backend it resolves answers)."""
        if unit not in self.proxies:
            return None
        deployment, proxy = self.proxies[unit]
        wanted = await asyncio.to_thread(backend_of, deployment, self.state)
        warmed = None
        if wanted.url != proxy.backend.url and wanted is not NO_BACKEND:
            warmed = await warm_up(wanted.url, proxy.recent.newest(), api_key=wanted.api_key)
            log.info("%s: %s", unit, warmed.describe())
        try:
            async with httpx.AsyncClient(timeout=min(timeout_s, 5.0)) as probe:
                answered = (await probe.get(f"{wanted.url}/health")).status_code == 200
        except httpx.HTTPError:
            answered = False
        if answered:
            proxy.backend = wanted
            return {"unit": unit, "retargeted": True, "backend": wanted.url, "warmed": _said(warmed)}
        proxy.mark_unhealthy()  # the gate re-resolves and waits for /health there
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            now = proxy.status()
            if now.get("backend") == wanted.url and now.get("healthy"):
                return {"unit": unit, "retargeted": True, "backend": wanted.url, "warmed": _said(warmed)}
            await asyncio.sleep(0.01)
        return {"unit": unit, "retargeted": False, "backend": proxy.status().get("backend"), "wanted": wanted.url}
