"""The daemon's control socket, and the client side every restart of a proxied unit goes through.

A restart kills llama-server's in-flight streams. To make a switch cost clients latency, not
errors, whoever restarts the unit first asks the daemon to *drain* that unit's proxy: new
requests are held at the gate and the call returns once in-flight ones finished (or a timeout
passed); after the restart the proxy holds requests until the new server answers /health.
`DaemonProxyLink.drained` is that drain as the deploy layer's seam (specd.deploy.seams.ProxyLink):
the restart step of a switch runs inside it, and so does the daemon's own restart of a server
that stopped answering; with no daemon (or no proxy for the unit) it is a plain block. A unit of
the deployment's slot that does not serve (specd.deploy.slots) is not drained: the proxy sends it
nothing.

A blue-green switch does not drain at all: it starts the new server in the free slot, moves the
slot pointer, and asks the daemon to *retarget* (`DaemonProxyLink`): the proxy re-reads its
backend and checks /health there before the next request passes, while streams in flight stay on
the old server until they end.

The socket lives in the 0700 state directory, so only the user who runs specd can drain.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, Self

import httpx
import psutil

from specd.errors import LockBusy
from specd.paths import StateDir
from specd.proxy.warmup import WARM_BUDGET_S

if TYPE_CHECKING:  # starlette is imported where the server is built: every CLI command loads the client side
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

log = logging.getLogger(__name__)

DRAIN_TIMEOUT_S = 60.0
# A drain pauses the proxy for this long unless the switch renews it (every third of it): a switch
# killed mid-way (kill -9, a dropped SSH session) holds clients for at most one lease.
DRAIN_LEASE_S = 10.0


STALE_AFTER_S = 30.0  # the daemon rewrites its status file every 5 s


def take_daemon_lock(state: StateDir) -> int:
    """One daemon per state directory: the lock's file descriptor, held for the daemon's life."""
    path = state.daemon_lock
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise LockBusy(f"another specd daemon runs here (see {state.daemon_status})") from None
    return fd


def write_daemon_status(state: StateDir, data: dict[str, Any]) -> None:
    """The status file `daemon_status` reads, replaced whole (a reader never sees half of it)."""
    path = state.daemon_status
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(data, default=str))
    os.replace(tmp, path)


def daemon_status(state: StateDir, unit: str | None = None) -> dict[str, Any]:
    """For `specd status`: is the daemon alive, the last health result, the next tuning run."""
    try:
        data = json.loads(state.daemon_status.read_text())
    except (OSError, ValueError):
        return {"running": False, "detail": "no specd daemon has run here (`specd daemon`, or units/specd.service)"}
    pid = int(data.get("pid", 0))
    age_s = time.time() - float(data.get("heartbeat_at", 0))
    running = bool(data.get("running")) and psutil.pid_exists(pid) and age_s < STALE_AFTER_S
    units: dict[str, Any] = data.get("units", {})
    chosen = units.get(unit) if unit else (next(iter(units.values())) if len(units) == 1 else None)
    return {
        "running": running, "pid": pid if running else None, "started_at": data.get("started_at"),
        "heartbeat_age_s": round(age_s, 1), "next_tuning": data.get("next_tuning"),
        "last_health": (chosen or {}).get("health"), "units": units,
        "detail": "running" if running else f"not running (last seen {age_s:.0f} s ago)",
    }


def _request(state: StateDir, method: str, path: str, params: dict[str, Any],
             timeout_s: float) -> dict[str, Any] | None:
    sock = state.daemon_socket
    if not sock.exists():
        return None
    transport = httpx.HTTPTransport(uds=str(sock))
    try:
        with httpx.Client(transport=transport, timeout=timeout_s) as client:
            response = client.request(method, f"http://specd{path}", params=params)
    except httpx.HTTPError as exc:
        log.debug("daemon control socket %s: %s", sock, exc)
        return None
    if response.status_code != 200:
        return None
    answer: dict[str, Any] = response.json()
    return answer


def drain(state: StateDir, unit: str, timeout_s: float = DRAIN_TIMEOUT_S,
          lease_s: float = DRAIN_LEASE_S) -> dict[str, Any] | None:
    """Hold new requests to `unit`'s proxy and wait for in-flight ones; None when nothing proxies it."""
    return _request(state, "POST", "/drain", {"unit": unit, "timeout": timeout_s, "lease": lease_s}, timeout_s + 10)


def renew(state: StateDir, unit: str, lease_s: float = DRAIN_LEASE_S) -> dict[str, Any] | None:
    return _request(state, "POST", "/renew", {"unit": unit, "lease": lease_s}, 5)


def resume(state: StateDir, unit: str) -> dict[str, Any] | None:
    return _request(state, "POST", "/resume", {"unit": unit}, 10)


def daemon_request(state: StateDir, path: str) -> dict[str, Any] | None:
    return _request(state, "GET", path, {}, 5)


class StepRelay:
    """A switch's steps, told to the daemon so its status page shows a CLI switch live too. Best
    effort: a missing or slow daemon costs one short timeout, then the relay stays quiet."""

    def __init__(self, state: StateDir, unit: str, timeout_s: float = 0.5) -> None:
        self.state = state
        self.unit = unit
        self.timeout_s = timeout_s
        self.quiet = not state.daemon_socket.exists()

    def __call__(self, step: str, detail: str) -> None:
        if self.quiet:
            return
        answer = _request(self.state, "POST", "/step", {"unit": self.unit, "step": step, "detail": detail[:2000]},
                          self.timeout_s)
        self.quiet = answer is None


RETARGET_TIMEOUT_S = 10.0


class DaemonProxyLink:
    """The daemon's proxy for a switch in another process (specd.deploy.seams.ProxyLink)."""

    def __init__(self, state: StateDir) -> None:
        self.state = state

    def serving(self, unit: str) -> bool:
        answer = daemon_request(self.state, "/status") or {}
        return bool((answer.get("units", {}).get(unit) or {}).get("proxy"))

    def retarget(self, unit: str) -> bool | None:
        answer = _request(self.state, "POST", "/retarget", {"unit": unit, "timeout": RETARGET_TIMEOUT_S},
                          RETARGET_TIMEOUT_S + WARM_BUDGET_S + 5)  # the daemon warms the new server first
        return None if answer is None else bool(answer.get("retargeted"))

    def drained(self, unit: str) -> AbstractContextManager[object]:
        return drained(self.state, unit)

    def reroute(self, unit: str, timeout_s: float) -> bool | None:
        answer = _request(self.state, "POST", "/reroute", {"unit": unit, "timeout": timeout_s}, timeout_s + 10)
        return None if answer is None else bool(answer.get("idle"))


def _in_flight(state: StateDir, unit: str) -> int:
    answer = daemon_request(state, "/status") or {}
    proxy = (answer.get("units", {}).get(unit) or {}).get("proxy") or {}
    return int(proxy.get("active", 0))


class _Renewal:
    """Renews a drain's lease every third of it, from a thread, until stopped."""

    def __init__(self, state: StateDir, unit: str, lease_s: float) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(state, unit, lease_s), daemon=True,
                                        name="drain-lease")

    def _run(self, state: StateDir, unit: str, lease_s: float) -> None:
        while not self._stop.wait(lease_s / 3):
            renew(state, unit, lease_s)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()


@contextmanager
def drained(state: StateDir, unit: str, timeout_s: float = DRAIN_TIMEOUT_S,
            lease_s: float = DRAIN_LEASE_S) -> Iterator[dict[str, Any] | None]:
    """Drain around a restart. Resumes in every case, Ctrl-C or SIGTERM during the drain call
    itself included; a killed caller's pause ends with its lease."""
    if state.daemon_socket.exists():
        waiting = _in_flight(state, unit)
        if waiting:
            log.warning("waiting for %d in-flight request%s to %s, up to %.0f s; Ctrl-C aborts the switch and "
                        "resumes traffic", waiting, "" if waiting == 1 else "s", unit, timeout_s)
    try:
        with _Renewal(state, unit, lease_s):
            answer = drain(state, unit, timeout_s, lease_s)
            if answer is not None and not answer.get("drained"):
                log.warning("%s: %s request(s) still in flight after %.0f s; restarting anyway",
                            unit, answer.get("active"), timeout_s)
            yield answer
    finally:
        resume(state, unit)


# ---- the server side (run by the daemon) --------------------------------------------------------

Drainer = Callable[[str, float, float], Awaitable[dict[str, Any] | None]]  # unit, timeout, lease
Renewer = Callable[[str, float], dict[str, Any] | None]  # unit, lease
Resumer = Callable[[str], dict[str, Any] | None]
StepListener = Callable[[str, str, str], None]  # unit, step, detail

Retargeter = Callable[[str, float], Awaitable[dict[str, Any] | None]]  # unit, timeout


async def _no_retarget(unit: str, timeout_s: float) -> dict[str, Any] | None:
    return None


def _answered(answer: dict[str, Any] | None, missing: str = "no proxy") -> Response:
    from starlette.responses import JSONResponse

    return JSONResponse(answer) if answer is not None else JSONResponse({"error": missing}, 404)


def control_app(*, drain_unit: Drainer, renew_unit: Renewer, resume_unit: Resumer,
                status: Callable[[], dict[str, Any]],
                metrics: Callable[[], bytes], metrics_content_type: str, writable: bool = True,
                on_step: StepListener | None = None, retarget_unit: Retargeter = _no_retarget,
                reroute_unit: Retargeter = _no_retarget) -> Starlette:
    """`/status` and `/metrics` for anyone the socket lets in; `/drain`, `/renew`, `/resume`, `/step`,
    `/retarget` and `/reroute` when writable."""
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route

    async def get_status(request: Request) -> Response:
        return Response(json.dumps(status(), default=str), media_type="application/json")

    async def get_metrics(request: Request) -> Response:
        return Response(metrics(), media_type=metrics_content_type)

    routes = [Route("/status", get_status), Route("/metrics", get_metrics)]
    if writable:
        routes += _writable_routes(drain_unit, renew_unit, resume_unit, on_step, retarget_unit, reroute_unit)
    return Starlette(routes=routes)


def _writable_routes(drain_unit: Drainer, renew_unit: Renewer, resume_unit: Resumer, on_step: StepListener | None,
                     retarget_unit: Retargeter, reroute_unit: Retargeter) -> list[Route]:
    """What only the daemon's owner may ask (the socket is 0600): drain, renew, resume, step, retarget,
    reroute (re-read the routing state)."""
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def post_drain(request: Request) -> Response:
        unit = request.query_params.get("unit", "")
        try:
            timeout_s = float(request.query_params.get("timeout", DRAIN_TIMEOUT_S))
            lease_s = float(request.query_params.get("lease", DRAIN_LEASE_S))
        except ValueError:
            return JSONResponse({"error": "timeout and lease must be numbers"}, 400)
        answer = await drain_unit(unit, timeout_s, lease_s)
        return _answered(answer, f"no proxy for {unit}")

    async def post_renew(request: Request) -> Response:
        try:
            lease_s = float(request.query_params.get("lease", DRAIN_LEASE_S))
        except ValueError:
            return JSONResponse({"error": "lease must be a number"}, 400)
        answer = renew_unit(request.query_params.get("unit", ""), lease_s)
        return _answered(answer)

    async def post_resume(request: Request) -> Response:
        answer = resume_unit(request.query_params.get("unit", ""))
        return _answered(answer)

    async def post_step(request: Request) -> Response:
        if on_step is not None:
            query = request.query_params
            on_step(query.get("unit", ""), query.get("step", ""), query.get("detail", ""))
        return JSONResponse({"heard": on_step is not None})

    def with_timeout(action: Retargeter, default_s: float) -> Callable[[Request], Awaitable[Response]]:
        """A POST that takes ?unit= and ?timeout= (seconds) and answers what `action` says."""
        async def post(request: Request) -> Response:
            try:
                timeout_s = float(request.query_params.get("timeout", default_s))
            except ValueError:
                return JSONResponse({"error": "timeout must be a number"}, 400)
            return _answered(await action(request.query_params.get("unit", ""), timeout_s))
        return post

    post_retarget = with_timeout(retarget_unit, RETARGET_TIMEOUT_S)
    post_reroute = with_timeout(reroute_unit, DRAIN_TIMEOUT_S)

    return [Route("/drain", post_drain, methods=["POST"]), Route("/renew", post_renew, methods=["POST"]),
            Route("/resume", post_resume, methods=["POST"]), Route("/step", post_step, methods=["POST"]),
            Route("/retarget", post_retarget, methods=["POST"]), Route("/reroute", post_reroute, methods=["POST"])]
