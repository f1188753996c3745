"""The alias endpoint clients talk to: an OpenAI-compatible pass-through that hides switches.

A switch restarts llama-server; a client talking to it directly sees refused connections and
"Loading model" 503s. Through the proxy it sees latency instead: a request that cannot reach a
healthy backend waits at a gate (the *hold*) until the backend answers `/health` or the hold
timeout passes. A request is re-sent only when it provably never reached the server: a refused
connection, or a 503 while loading. A connection the backend accepted and then dropped may mean
the server crashed *on this request* (a GGML_ASSERT on some input): it is re-sent at most once,
and only when the backend still answers /health at once (a stale keep-alive connection after a
restart); otherwise the client gets a 502 right away and the traffic row says why, so one poison
request costs one server restart, not a crash loop. Once response bytes flowed to the client
nothing is re-sent. `pause`/`wait_idle`/`resume` let a switch drain in-flight streams
before the restart (the daemon serves them on its control socket; see `specd.daemon.control`).

Streams are relayed event by event (whole SSE events, never split), so a stream cut at shutdown
ends on an event boundary with an error event and a proper end of body. Headers pass through
untouched (auth included) and are never logged or stored; traffic rows keep only the shape.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from specd.daemon.gate import BackendGate, HoldExpired
from specd.daemon.metrics import SpecdMetrics, route_label
from specd.daemon.relay import (
    CUT,
    REDACT_QUERY_STRINGS,
    Exchange,
    RelayResponse,
    client_gone,
    json_object,
    pump,
    read_bounded,
    relay_events,
    task_class_of,
)
from specd.profiles.config import DEFAULT_HOLD_TIMEOUT_S
from specd.traffic.capture import BodyCapture
from specd.traffic.records import Recorder
from specd.traffic.shape import request_shape

log = logging.getLogger(__name__)

HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
    "transfer-encoding", "upgrade", "host", "content-length", "accept-encoding",
})
_METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD")
# The request never reached a server: sending it again is always safe.
_NEVER_REACHED = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
# The server accepted the connection, then dropped it before a status line: perhaps it crashed on it.
_DROPPED = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


@dataclass(frozen=True)
class Backend:
    """Where the active profile's llama-server listens, and which profile that is."""

    url: str
    profile: str | None = None


@dataclass(frozen=True)
class ProxySettings:
    hold_timeout_s: float = DEFAULT_HOLD_TIMEOUT_S
    max_body_bytes: int = 64 * 1024 * 1024
    health_poll_s: float = 0.1
    unit: str = ""
    # A streamed response that sends nothing for this long is ended with an error event (a hung
    # backend); generous, because a long prompt's prefill is silent too.
    stream_idle_timeout_s: float = 300.0
    body_timeout_s: float = 60.0  # a client must send its whole request body within this


def _error(status: int, message: str, kind: str = "unavailable_error") -> JSONResponse:
    headers = {"Retry-After": "5"} if status == 503 else None
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status, headers)


class Proxy:
    def __init__(
        self,
        settings: ProxySettings,
        resolve_backend: Callable[[], Backend],
        *,
        recorder: Recorder | None = None,
        metrics: SpecdMetrics | None = None,
        capture: BodyCapture | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.settings = settings
        self._resolve = resolve_backend
        self._recorder, self._metrics, self._capture = recorder, metrics, capture
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        logging.getLogger("httpx").addFilter(REDACT_QUERY_STRINGS)  # idempotent: one filter object
        self.backend = resolve_backend()
        self.in_flight = 0      # requests accepted and not yet answered (held ones included)
        self.accepted = 0       # requests accepted since start (the nightly run watches for clients)
        self.active = 0         # requests past the gate, talking to the backend
        self.gate = BackendGate(self._probe_backend, poll_s=settings.health_poll_s)
        self._idle = asyncio.Event()
        self._idle.set()
        self._relays: set[asyncio.Queue[object]] = set()
        self.app = Starlette(
            routes=[Route("/{path:path}", self._handle, methods=list(_METHODS))],
            lifespan=self._lifespan,
        )

    # ---- lifecycle --------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        await self.start()
        try:
            yield
        finally:
            await self.stop()

    async def start(self) -> None:
        self._client = httpx.AsyncClient(
            transport=self._transport,
            timeout=httpx.Timeout(connect=2.0, read=None, write=60.0, pool=None),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
        )

    async def stop(self) -> None:
        self.gate.stop()
        if self._client is not None:
            await self._client.aclose()

    async def shutdown(self, grace_s: float) -> None:
        """Stop taking requests; let in-flight ones finish for `grace_s`, then cut streams cleanly."""
        self.gate.close()  # wake held requests: they answer 503 instead of waiting
        if not await self.wait_idle(grace_s):
            for queue in list(self._relays):
                queue.put_nowait(CUT)
            await self.wait_idle(5.0)

    # ---- the gate (specd.daemon.gate): pause for a drain, hold while unhealthy ----------------

    @property
    def shutting_down(self) -> bool:
        return self.gate.closing

    def pause(self, lease_s: float) -> None:
        self.gate.pause(lease_s)

    def renew(self, lease_s: float) -> bool:
        return self.gate.renew(lease_s)

    def resume(self) -> None:
        self.gate.resume()

    @property
    def paused(self) -> bool:
        return self.gate.paused

    def mark_unhealthy(self) -> None:
        self.gate.mark_unhealthy()

    async def wait_idle(self, timeout_s: float) -> bool:
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def _answers_health_now(self) -> bool:
        """One quick /health probe on a fresh connection: is the server that dropped us still up?"""
        try:
            async with httpx.AsyncClient(timeout=1.0) as probe:
                response = await probe.get(f"{self.backend.url}/health")
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    async def _probe_backend(self) -> bool:
        """The gate's poll: re-resolve the backend (a switch may have moved it), then /health."""
        assert self._client is not None
        try:
            self.backend = await asyncio.to_thread(self._resolve)
            response = await self._client.get(f"{self.backend.url}/health", timeout=2.0)
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    async def _pass_gate(self, deadline: float) -> None:
        held_since = time.perf_counter()
        if self._metrics is not None:
            self._metrics.held_now.inc()
        try:
            await self.gate.wait(deadline, self.settings.hold_timeout_s)
        finally:
            if self._metrics is not None:
                self._metrics.held_now.dec()
                self._metrics.hold.observe(time.perf_counter() - held_since)

    # ---- requests -----------------------------------------------------------------------------

    async def _handle(self, request: Request) -> Response:
        if self.shutting_down:
            return _error(503, "specd proxy is shutting down")
        try:
            async with asyncio.timeout(self.settings.body_timeout_s):
                body = await read_bounded(request, self.settings.max_body_bytes)
        except ClientDisconnect:
            return Response(status_code=499)
        except TimeoutError:
            limit_s = self.settings.body_timeout_s
            return _error(408, f"request body not received within {limit_s:g} s", "invalid_request_error")
        if body is None:
            limit = self.settings.max_body_bytes
            return _error(413, f"request body over {limit} bytes", "invalid_request_error")
        endpoint = request.url.path
        document = json_object(body) if request.method == "POST" else None
        messages = document.get("messages") if document is not None else None
        task_class = task_class_of(messages) if isinstance(messages, list) else None
        stream = bool(document is not None and document.get("stream") is True)
        if self._capture is not None and document is not None and endpoint.endswith("/chat/completions"):
            self._capture.write(document, in_flight=self.in_flight)
        exchange = Exchange(endpoint, stream, task_class, self.in_flight, self.record)
        exchange.recorded = request.method == "POST"  # GET /v1/models, /health polls are not traffic
        exchange.shape = request_shape(document)
        self.in_flight += 1
        self.accepted += 1
        if self._metrics is not None:
            self._metrics.in_flight.set(self.in_flight)
        try:
            return await self._forward_while_connected(request, body, exchange)
        except asyncio.CancelledError:
            exchange.finish(499, "client went away")
            raise
        except Exception as exc:
            exchange.finish(500, f"proxy error: {type(exc).__name__}")
            raise

    async def _forward_while_connected(self, request: Request, body: bytes, exchange: Exchange) -> Response:
        """Forward, but give up (and free the backend) if the client leaves while held or waiting.

        Starlette does not watch for a disconnect before the response starts, so without this a
        client that hangs up during a hold or a long non-streamed completion leaves the backend
        generating for nobody.
        """
        forward = asyncio.ensure_future(self._forward(request, body, exchange))
        gone = asyncio.ensure_future(client_gone(request))
        try:
            await asyncio.wait({forward, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if not forward.done():
            forward.cancel()
        try:
            return await forward  # a response that raced the hang-up is still returned: it cleans up
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not forward.cancelled() or (current is not None and current.cancelling()):
                raise
        exchange.finish(499, "client went away")
        return Response(status_code=499)

    async def _forward(self, request: Request, body: bytes, exchange: Exchange) -> Response:
        assert self._client is not None
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP]
        headers.append(("accept-encoding", "identity"))
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        deadline = exchange.started + self.settings.hold_timeout_s
        idle_s = self.settings.stream_idle_timeout_s if exchange.stream else None
        timeout = httpx.Timeout(connect=2.0, read=idle_s, write=60.0, pool=None)
        last: tuple[int, bytes] | None = None
        dropped_once = False
        while True:
            if self.shutting_down:
                return self._reject(exchange, _error(503, "specd proxy is shutting down"))
            try:
                await self._pass_gate(deadline)
            except HoldExpired as expired:
                if last is not None:  # the backend's own 503 (e.g. "Loading model") says most
                    return self._reject(exchange, Response(last[1], last[0], media_type="application/json"))
                return self._reject(exchange, _error(503, str(expired)))
            self._begin_active(exchange)
            try:
                upstream = await self._client.send(
                    self._client.build_request(request.method, self.backend.url + target, headers=headers,
                                               content=body, timeout=timeout),
                    stream=True,
                )
            except _NEVER_REACHED:
                self._end_active()
                self._note_retry()
                continue
            except _DROPPED as exc:
                self._end_active()
                if dropped_once or not await self._answers_health_now():
                    self.mark_unhealthy()
                    exchange.error = (f"the backend dropped the connection after accepting the request "
                                      f"({type(exc).__name__}); it may have crashed on it: not re-sent")
                    log.warning("%s %s: %s", request.method, target, exchange.error)
                    return self._reject(exchange, _error(502, exchange.error, "api_error"))
                dropped_once = True  # a stale keep-alive connection to a live server: once more
                if self._metrics is not None:
                    self._metrics.retries.inc()
                continue
            except httpx.HTTPError as exc:  # a hung backend (read timeout) or a request httpx refuses
                self._end_active()
                status = 504 if isinstance(exc, httpx.TimeoutException) else 502
                exchange.error = f"backend: {type(exc).__name__}"
                return self._reject(exchange, _error(status, f"the backend did not answer: {type(exc).__name__}",
                                                     "api_error"))
            except BaseException:
                self._end_active()
                raise
            if upstream.status_code == 503:
                last = (503, await upstream.aread())
                await upstream.aclose()
                self._end_active()
                self._note_retry()
                continue
            return await self._respond(upstream, exchange)

    def _begin_active(self, exchange: Exchange) -> None:
        exchange.profile = self.backend.profile
        exchange.attempts += 1
        exchange.held_ms = 1000.0 * (time.perf_counter() - exchange.started)
        self.active += 1
        self._idle.clear()

    def _end_active(self) -> None:
        self.active -= 1
        if self.active == 0:
            self._idle.set()

    def _note_retry(self) -> None:
        self.mark_unhealthy()
        if self._metrics is not None:
            self._metrics.retries.inc()

    def _reject(self, exchange: Exchange, response: Response) -> Response:
        held = response.status_code == 503
        exchange.finish(response.status_code, "held past the hold timeout" if held else None)
        return response

    async def _respond(self, upstream: httpx.Response, exchange: Exchange) -> Response:
        headers = {k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP}
        if not upstream.headers.get("content-type", "").startswith("text/event-stream"):
            try:
                content = await upstream.aread()
            except httpx.HTTPError as exc:
                exchange.finish(502, f"backend dropped the response: {type(exc).__name__}")
                return _error(502, "the backend dropped the response", "api_error")
            finally:
                await upstream.aclose()
                self._end_active()
            if len(content) < 4 * 1024 * 1024:
                exchange.absorb(json_object(content))
            exchange.finish(upstream.status_code)
            return Response(content, upstream.status_code, headers)
        queue: asyncio.Queue[object] = asyncio.Queue()
        self._relays.add(queue)
        pumping = asyncio.get_running_loop().create_task(pump(upstream, queue))
        status = upstream.status_code

        async def on_close(client_left: bool) -> None:
            pumping.cancel()
            self._relays.discard(queue)
            await upstream.aclose()
            self._end_active()
            # a no-op when the relay reached the end of the body (it records first; see relay_events)
            if client_left:
                exchange.finish(499, "client went away")
            else:
                exchange.finish(status)

        return RelayResponse(relay_events(queue, exchange, status), status, headers, on_close)

    def status(self) -> dict[str, Any]:
        return {"backend": self.backend.url, "profile": self.backend.profile, "in_flight": self.in_flight,
                "active": self.active, "paused": self.paused, "healthy": self.gate.healthy}

    def record(self, exchange: Exchange, status: int, total_s: float, error: str | None) -> None:
        self.in_flight -= 1
        error = exchange.error or error
        if self._metrics is not None:
            self._metrics.in_flight.set(self.in_flight)
            self._metrics.requests.labels(route_label(exchange.endpoint), str(status)).inc()
            self._metrics.latency.labels(route_label(exchange.endpoint)).observe(total_s)
            if exchange.ttft_ms is not None:
                self._metrics.ttft.observe(exchange.ttft_ms / 1000.0)
        if self._recorder is None or not exchange.recorded:
            return
        self._recorder.record(exchange.to_record(self.settings.unit, status, total_s, error))
