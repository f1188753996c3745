"""The status page's HTTP side: the page, its JSON API, the event stream and the actions.

Read routes are open to whoever reaches the address (loopback by default); `POST /api/action`
needs a session from `POST /api/login` (the token) and the session's CSRF token in a header
(see `auth`). Every blocking read (SQLite, D-Bus, NVML) runs in Starlette's worker threads, so
the daemon's event loop, which also serves the proxy, never waits on them.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from specd.context import main_pid_of, seams_for
from specd.daemon.service import is_loopback
from specd.endpoint import http_client
from specd.errors import BadInput
from specd.profiles.config import Config, Deployment
from specd.web import auth, insights, views
from specd.web.actions import Actions, Submit
from specd.web.events import EventHub

STATIC = Path(__file__).resolve().parent / "static"
SECURITY_HEADERS = {
    "Content-Security-Policy": ("default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
                                "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "[::1]", "::1"]


class _TtlCache:
    """Figures that cost a DB scan or an NVML call are reused for a few seconds."""

    def __init__(self) -> None:
        self._items: dict[str, tuple[float, Any]] = {}

    def get(self, key: str, ttl_s: float, compute: Callable[[], Any]) -> Any:
        hit = self._items.get(key)
        if hit is not None and time.monotonic() - hit[0] < ttl_s:
            return hit[1]
        value = compute()
        self._items[key] = (time.monotonic(), value)
        return value

    def clear(self) -> None:
        self._items.clear()


def _json(data: Any, status: int = 200) -> Response:
    return Response(json.dumps(data, default=str), status_code=status, media_type="application/json",
                    headers=SECURITY_HEADERS)


class StatusPage:
    """The page for the daemon's deployments. `status` is the daemon's own report (called on the
    event loop); `submit` runs an action's work off the loop."""

    def __init__(self, config: Config, deployments: list[Deployment], *, status: Callable[[], dict[str, Any]],
                 submit: Submit, loop: asyncio.AbstractEventLoop) -> None:
        auth.check_exposure(config)
        self.config = config
        self.deployments = deployments
        self.status = status
        self.hub = EventHub(loop)
        self.sessions = auth.Sessions(auth.read_or_create_token(auth.token_path(config)))
        self.actions = Actions(config, deployments, self.hub, submit)
        self.cache = _TtlCache()
        self.http = http_client(httpx.Timeout(3.0, connect=1.0))  # the live health probe's
        listen = config.daemon.http_listen or "127.0.0.1:0"
        self.host, self.port = auth.split_listen(listen)
        self.app = self._build()

    def close(self) -> None:
        self.hub.close()
        self.http.close()

    def publish(self, name: str, /, **data: Any) -> None:
        if name in ("generation", "history-event"):
            self.cache.clear()
        self.hub.publish(name, **data)

    def _deployment(self, request: Request) -> Deployment:
        wanted = request.query_params.get("unit") or self.deployments[0].unit
        return self.actions.deployment(wanted)

    def _build(self) -> Starlette:
        routes = [
            Route("/", self.index), Route("/api/state", self.state), Route("/api/timeline", self.timeline),
            Route("/api/traffic", self.traffic), Route("/api/bench", self.bench), Route("/api/gpu", self.gpu),
            Route("/api/events", self.events), Route("/api/session", self.session),
            Route("/api/login", self.login, methods=["POST"]), Route("/api/logout", self.logout, methods=["POST"]),
            Route("/api/action", self.action, methods=["POST"]),
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ]
        middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=LOOPBACK_HOSTS)] if is_loopback(self.host) else []
        return Starlette(routes=routes, middleware=middleware, exception_handlers={BadInput: self._bad_input})

    async def _bad_input(self, request: Request, exc: Exception) -> Response:
        return _json({"error": str(exc)}, 400)

    # ---- reads -------------------------------------------------------------------------------------

    async def index(self, request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={**SECURITY_HEADERS, "Cache-Control": "no-cache"})

    async def state(self, request: Request) -> Response:
        daemon = self.status()  # on the loop: the daemon's own state is the loop's
        data = await run_in_threadpool(views.page_state, self.config, self.deployments, daemon, self.http)
        data["running_actions"] = [a.as_dict() for a in self.actions.running.values()]
        return _json(data)

    async def timeline(self, request: Request) -> Response:
        deployment = self._deployment(request)
        return _json(await run_in_threadpool(views.timeline, deployment))

    async def traffic(self, request: Request) -> Response:
        deployment = self._deployment(request)
        try:
            hours = min(24.0 * 31, max(1.0, float(request.query_params.get("hours", "24"))))
        except ValueError:
            return _json({"error": "hours must be a number"}, 400)
        data = await run_in_threadpool(self.cache.get, f"traffic:{deployment.unit}:{hours}", 5.0,
                                       lambda: insights.traffic_view(deployment.unit, hours))
        return _json(data)

    async def bench(self, request: Request) -> Response:
        deployment = self._deployment(request)
        data = await run_in_threadpool(self.cache.get, f"bench:{deployment.unit}", 30.0,
                                       lambda: insights.bench_view(deployment.unit))
        return _json(data)

    async def gpu(self, request: Request) -> Response:
        def compute() -> dict[str, Any]:
            return insights.gpu_view(self.deployments, {d.unit: _main_pid(d) for d in self.deployments})

        return _json(await run_in_threadpool(self.cache.get, "gpu", 10.0, compute))

    async def events(self, request: Request) -> Response:
        last = request.headers.get("last-event-id", "0")
        return StreamingResponse(self.hub.stream(int(last) if last.isdigit() else 0), media_type="text/event-stream",
                                 headers={**SECURITY_HEADERS, "X-Accel-Buffering": "no"})

    # ---- the session and the actions -------------------------------------------------------------------

    async def session(self, request: Request) -> Response:
        session = self.sessions.get(request.cookies.get(auth.SESSION_COOKIE))
        return _json({"authenticated": session is not None, "csrf": session.csrf if session else None})

    def _origin_refusal(self, request: Request) -> str | None:
        origin = request.headers.get("origin")
        if origin is not None and origin != f"{request.url.scheme}://{request.headers.get('host', '')}":
            return f"refused: a request from {origin} (only this page may act)"
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            return "refused: actions are JSON requests"
        return None

    async def _body(self, request: Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except ValueError:
            return {}
        return body if isinstance(body, dict) else {}

    async def login(self, request: Request) -> Response:
        refusal = self._origin_refusal(request)
        if refusal is not None:
            return _json({"error": refusal}, 403)
        offered = str((await self._body(request)).get("token", ""))
        granted = self.sessions.login(offered)
        if granted is None:
            return _json({"error": "wrong token (see `specd web-token`)"}, 403)
        session_id, session = granted
        response = _json({"authenticated": True, "csrf": session.csrf})
        response.set_cookie(auth.SESSION_COOKIE, session_id, max_age=int(auth.SESSION_TTL_S), httponly=True,
                            samesite="strict", secure=request.url.scheme == "https", path="/")
        return response

    async def logout(self, request: Request) -> Response:
        self.sessions.logout(request.cookies.get(auth.SESSION_COOKIE))
        response = _json({"authenticated": False})
        response.delete_cookie(auth.SESSION_COOKIE, path="/")
        return response

    async def action(self, request: Request) -> Response:
        refusal = self._origin_refusal(request) or self.sessions.authorize(
            request.cookies.get(auth.SESSION_COOKIE), request.headers.get(auth.CSRF_HEADER))
        if refusal is not None:
            return _json({"error": refusal}, 403)
        body = await self._body(request)
        profile = body.get("profile")
        started = await run_in_threadpool(self.actions.start, str(body.get("unit", "")), str(body.get("kind", "")),
                                          str(profile) if profile else None)
        return _json({"action": started.as_dict()}, 202)


def _main_pid(deployment: Deployment) -> int:
    seams = seams_for(deployment)
    try:
        return main_pid_of(seams)
    finally:
        seams.close()
