"""The alias endpoint clients talk to: an OpenAI-compatible pass-through that hides switches.

A switch restarts llama-server; a client talking to it directly sees refused connections and
"Loading model" 503s. Through the proxy it sees latency instead: a request that cannot reach a
healthy backend waits at a gate (the *hold*, specd.proxy.gate) until the backend answers
`/health` or the hold timeout passes. What is re-sent and what is answered with an error is the
re-send rule (specd.proxy.resend). `pause`/`wait_idle`/`resume` let a switch drain in-flight
streams before the restart (the daemon serves them on its control socket; see
`specd.daemon.control`). Headers pass through untouched (auth included) and are never logged or
stored; traffic rows keep only the shape (specd.proxy.exchange). A request dropped by a server
that then stops answering /health (before answering or mid-stream) is reported as the likely cause
of the crash (`on_crash`, see specd.proxy.crashes); a shutdown answers held and unanswered
requests 503 (at once, and at the end of its grace) and cuts streams on an event boundary.

Every request pays the proxy's own cost, so the path is short: HTTP/1.1 on asyncio protocols with
httptools on both sides (specd.proxy.http1: no ASGI, no HTTP client library), the request sent
upstream on a pooled connection the moment it is whole (its shape is read while the backend
works), the stream relayed from the backend connection's callback to the client's socket
(specd.proxy.relay), the traffic row handed to a writer thread. benchmarks/proxy_overhead.py
measures it beside nginx.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from specd.profiles.config import DEFAULT_HOLD_TIMEOUT_S
from specd.proxy import resend
from specd.proxy.crashes import Crash, CrashWatch, DroppedRequest, Phase
from specd.proxy.exchange import Exchange, Recording, json_object
from specd.proxy.gate import BackendGate, HoldExpired
from specd.proxy.http1.client import UpstreamPool, answers_health_now, forwarded_headers
from specd.proxy.http1.responder import Responder
from specd.proxy.http1.response import UpstreamFailed, UpstreamResponse
from specd.proxy.http1.server import ClientRequest, FrontLimits, FrontServer
from specd.proxy.metrics import ProxyMetrics
from specd.proxy.relay import ClientWatch, Relay, read_whole, respond, start_stream
from specd.proxy.routes import Routed, Router
from specd.proxy.warmup import RecentRequests
from specd.traffic.capture import BodyCapture
from specd.traffic.records import Recorder

log = logging.getLogger(__name__)
SHUTTING_DOWN = "specd proxy is shutting down"


class _ShutDownWhileWaiting(Exception):
    """The shutdown's grace ended while this request waited for the backend's status line."""


@dataclass(frozen=True)
class Backend:
    """Where the active profile's llama-server listens, and which profile that is."""

    url: str
    profile: str | None = None
    api_key: str | None = None  # the server's own key (a warm-up sends it; clients send theirs)


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
    header_timeout_s: float = 30.0  # ... and a request's headers within this (slowloris)


class Proxy:
    def __init__(
        self,
        settings: ProxySettings,
        resolve_backend: Callable[[], Backend],
        *,
        recorder: Recorder | None = None,
        metrics: ProxyMetrics | None = None,
        capture: BodyCapture | None = None,
        on_crash: Callable[[Crash], None] | None = None,
        router: Router | None = None,
    ) -> None:
        self.settings = settings
        self._resolve = resolve_backend
        self.router = router  # routing across resident profiles (specd.proxy.routes); None: one server
        self._metrics, self._capture = metrics, capture
        self._recording = Recording(settings.unit, recorder, metrics)
        self._upstream = UpstreamPool()
        self._crashes = CrashWatch(lambda: answers_health_now(self.backend.url), self.mark_unhealthy, on_crash)
        self.backend = resolve_backend()
        self.in_flight = 0      # requests accepted and not yet answered (held ones included)
        self.accepted = 0       # requests accepted since start (the nightly run watches for clients)
        self.active = 0         # requests past the gate, talking to the backend
        self.gate = BackendGate(self._probe_backend, poll_s=settings.health_poll_s)
        self._idle = asyncio.Event()
        self._idle.set()
        self._relays: set[Relay] = set()
        self._waiting: set[asyncio.Task[None]] = set()  # requests sent upstream, no status line yet
        self._cut: set[asyncio.Task[None]] = set()  # ... of which the shutdown cancelled these
        self.recent = RecentRequests()  # what a blue-green flip warms the new server's cache with

    # ---- the server and its lifecycle -----------------------------------------------------------

    def server(self, grace_s: float = 30.0) -> FrontServer:
        """The server that takes clients' connections for this proxy (`serve`, `started`, `should_exit`)."""
        limits = FrontLimits(self.settings.max_body_bytes, self.settings.body_timeout_s,
                             self.settings.header_timeout_s)
        return FrontServer(self.handle, limits, grace_s=grace_s, on_stop=self.stop)

    async def stop(self) -> None:
        self.gate.stop()
        if self.router is not None:
            self.router.stop()
        self._upstream.close()
        if self._capture is not None:  # the bodies still queued reach the disk
            await asyncio.to_thread(self._capture.close)

    async def shutdown(self, grace_s: float) -> None:
        """Stop taking requests; let in-flight ones finish for `grace_s`, then cut streams cleanly."""
        self.gate.close()  # wake held requests: they answer 503 instead of waiting
        if not await self.wait_idle(grace_s):
            for relay in list(self._relays):
                relay.stop("shutdown")
            for waiting in list(self._waiting):  # still waiting for a status line: a clean 503
                self._cut.add(waiting)
                waiting.cancel()
            await self.wait_idle(5.0)

    # ---- the gate (specd.proxy.gate): pause for a drain, hold while unhealthy ----------------

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

    async def _probe_backend(self) -> bool:
        """The gate's poll: re-resolve the backend (a switch may have moved it), then /health."""
        self.backend = await asyncio.to_thread(self._resolve)
        return await self._upstream.healthy(self.backend.url)

    async def _pass_gate(self, deadline: float) -> None:
        if self.gate.open:  # the usual case: no wait, no gauge to move
            if self._metrics is not None:
                self._metrics.hold.observe(0.0)
            return
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

    def handle(self, request: ClientRequest, responder: Responder) -> Coroutine[Any, Any, None]:
        """Take one whole request: specd.proxy.http1.server calls this the moment the request is whole and
        runs what it returns as the request's task. With the gate open and a pooled connection idle,
        the request leaves for the backend here and now; reading its shape, recording and the rest
        happen in the task while the backend works (every step before the send is added latency)."""
        headers = forwarded_headers(request.headers)
        route = self._route(request)
        sent = None
        if (self.gate.open or route.url is not None) and not self.shutting_down:
            sent = self._upstream.send_now(request.method, route.url or self.backend.url, request.target, headers,
                                           route.body)
            if sent is not None:
                self._mark_active(route)
        return self._handle(request, responder, headers, sent, route)

    def _route(self, request: ClientRequest) -> Routed:
        """Where the request goes: the primary as it is, unless routing is on (specd.proxy.routes)."""
        router = self.router
        if router is None or not router.active or request.method != "POST":
            return Routed(None, self.backend.profile, request.body)
        document = json_object(request.body) if request.body else None
        return router.pick(request.target, document, request.body, self.backend.url, self.backend.profile,
                           self.gate.open and not self.gate.paused, self.active)

    async def _handle(self, request: ClientRequest, responder: Responder, headers: bytes,
                      sent: UpstreamResponse | None, route: Routed) -> None:
        if self.shutting_down and sent is None:
            responder.error(503, SHUTTING_DOWN)
            return
        path, body = request.path, request.body
        exchange, document = Exchange.of_request(request.method, path, body, self.in_flight, self._finished,
                                                 started=request.received)
        self.recent.note(path, document, len(body))
        if self._capture is not None and document is not None and exchange.endpoint.endswith("/chat/completions"):
            self._capture.submit(document, in_flight=self.in_flight)
        self.in_flight += 1
        self.accepted += 1
        if self._metrics is not None:
            self._metrics.in_flight.set(self.in_flight)
        watch = ClientWatch(responder)
        try:
            await self._forward(request, headers, exchange, responder, watch, sent, route)
        except asyncio.CancelledError:
            exchange.finish(499, "client went away")
            current = asyncio.current_task()
            if not watch.left or current is None or current.uncancel() > 0:
                raise  # cancelled for another reason than the client leaving (the server stops)
        except Exception as exc:
            exchange.finish(500, f"proxy error: {type(exc).__name__}")
            raise
        finally:
            watch.close()

    async def _forward(self, request: ClientRequest, headers: bytes, exchange: Exchange, responder: Responder,
                       watch: ClientWatch, sent: UpstreamResponse | None, route: Routed) -> None:
        """Get the request answered: through the gate (the primary's; a companion has none), to the
        backend, re-sent by the re-send rule — a companion that fails it hands the request to the primary."""
        deadline = exchange.started + self.settings.hold_timeout_s
        read_timeout_s = self.settings.stream_idle_timeout_s if exchange.stream else None
        loading: bytes | None = None  # the backend's own 503 body ("Loading model"), if that is all we got
        dropped_before = False  # once True, a drop is answered 502 even when the server is up
        stale = 0
        while True:
            if not await self._through_gate(deadline, exchange, responder, loading, sent, route):
                return
            first, sent = sent, None
            try:
                try:
                    upstream = await self._send_upstream(
                        request, headers, route, read_timeout_s, first,
                        functools.partial(start_stream, exchange=exchange, responder=responder, watch=watch,
                                          relays=self._relays))
                except UpstreamFailed as failed:
                    outcome: resend.Outcome = failed.outcome
                    cause = failed.cause_name
                except _ShutDownWhileWaiting:
                    self._reject(responder, exchange, 503, SHUTTING_DOWN)
                    return
                else:
                    if upstream.status != 503:
                        await respond(upstream, exchange, responder, watch, self._relays)
                        if exchange.failed_status == 502:  # the backend dropped the answer: did it go down on it?
                            await self._dropped_mid_stream(request, exchange, route)
                        return
                    outcome, cause = "loading", "503"
                    answered_503 = await read_whole(upstream)
                    loading = answered_503 if route.url is None else loading  # a companion's is not the primary's
            finally:
                self._end_active(route)
            answers = False
            if outcome == "dropped":  # always judged: a server that went down names this request
                answers, cause = await self._judge_drop(request, exchange, cause, route)
                stale += answers  # a live server: a stale pooled connection, tried again up to a bound
            verdict = resend.decide(outcome, dropped_before=dropped_before, answers_health_now=answers)
            dropped_before = dropped_before or (outcome == "dropped"
                                                and (not answers or stale >= resend.MAX_STALE_RESENDS))
            if verdict.mark_unhealthy:
                route = self._unhealthy(route)
            if verdict.resend:
                if self._metrics is not None:
                    self._metrics.retries.inc()
                continue
            assert verdict.status is not None
            exchange.error = f"{verdict.reason} ({cause})"
            log.warning("%s %s: %s", request.method, request.path, exchange.error)
            self._reject(responder, exchange, verdict.status, exchange.error, "api_error")
            return

    async def _dropped_mid_stream(self, request: ClientRequest, exchange: Exchange, route: Routed) -> None:
        """The primary names the request it went down on (specd.proxy.crashes); a companion is marked down."""
        if route.url is None:
            await self._crashes.survived(self._dropped(request, exchange, "mid-stream"))
        elif self.router is not None:
            self.router.mark_down(route.url)

    def _unhealthy(self, route: Routed) -> Routed:
        """The attempt's server is down: a companion is marked down and the request goes to the primary
        (so do the next ones until its /health answers); the primary closes its gate."""
        if route.url is not None and self.router is not None:
            self.router.mark_down(route.url)
            return Routed(None, self.backend.profile, route.body, route.task_class, "drained")
        self.mark_unhealthy()
        return route

    async def _judge_drop(self, request: ClientRequest, exchange: Exchange, cause: str,
                          route: Routed) -> tuple[bool, str]:
        """(the server still answers /health, the cause naming the request); a server that went
        down on it reports it (specd.proxy.crashes)."""
        lost = self._dropped(request, exchange, "before answering")
        if route.url is not None:  # a companion: it is marked down instead (its crash is not the primary's)
            return await answers_health_now(route.url), f"{lost.request_id}, {cause}"
        return await self._crashes.survived(lost), f"{lost.request_id}, {cause}"

    async def _through_gate(self, deadline: float, exchange: Exchange, responder: Responder,
                            loading: bytes | None, sent: UpstreamResponse | None, route: Routed) -> bool:
        """Wait at the gate, then count the attempt as active; False once the client was answered (held
        too long, or shutting down). A request already `sent` passed the gate open as it arrived; one
        routed to a companion does not wait for the primary's gate."""
        if sent is not None or (route.url is not None and not self.shutting_down):
            if self._metrics is not None:
                self._metrics.hold.observe(0.0)
            if sent is None:
                self._mark_active(route)
            self._note_attempt(exchange, route, sent.sent_at if sent is not None else None)
            return True
        try:
            await self._pass_gate(deadline)
        except HoldExpired as expired:
            if loading is not None:  # the backend's own 503 ("Loading model") says most
                exchange.finish(503, "held past the hold timeout: the backend still answered 503")
                responder.answer(503, [(b"content-type", b"application/json")], loading)
            else:
                self._reject(responder, exchange, 503, str(expired))
            return False
        if self.shutting_down:  # checked after the gate: a shutdown lets held requests go, to a 503
            self._reject(responder, exchange, 503, SHUTTING_DOWN)
            return False
        self._mark_active(route)
        self._note_attempt(exchange, route)
        return True

    async def _send_upstream(self, request: ClientRequest, headers: bytes, route: Routed,
                             read_timeout_s: float | None, sent: UpstreamResponse | None,
                             on_status: Callable[[UpstreamResponse], None]) -> UpstreamResponse:
        """Send (unless `sent` already went) and wait for the status line, `on_status` run the moment
        it arrives; a shutdown at the end of its grace cuts that wait (answered 503)."""
        task = asyncio.current_task()
        assert task is not None
        self._waiting.add(task)
        try:
            if sent is None:
                return await self._upstream.send(request.method, route.url or self.backend.url, request.target,
                                                 headers, route.body, read_timeout_s, on_status)
            sent.set_read_timeout(read_timeout_s)
            sent.on_status = on_status
            await sent.started()
            return sent
        except asyncio.CancelledError:
            if task in self._cut and task.cancelling() == 1:  # the shutdown's cancel, and nobody else's
                task.uncancel()
                raise _ShutDownWhileWaiting from None
            raise
        finally:
            self._waiting.discard(task)
            self._cut.discard(task)

    @staticmethod
    def _dropped(request: ClientRequest, exchange: Exchange, phase: Phase) -> DroppedRequest:
        return DroppedRequest.of(request.method, request.path, request.body, exchange, phase)

    def _mark_active(self, route: Routed) -> None:
        """An attempt begins: the primary's count (what a drain waits on), or the companion's."""
        if route.url is not None and self.router is not None:
            self.router.begin(route.url)
            return
        self.active += 1
        self._idle.clear()

    def _note_attempt(self, exchange: Exchange, route: Routed, sent_at: float | None = None) -> None:
        """An attempt is under way: held from arrival until sent (`sent_at`, or now)."""
        exchange.profile = route.profile if route.url is not None else self.backend.profile
        exchange.attempts += 1
        exchange.held_ms = 1000.0 * ((time.perf_counter() if sent_at is None else sent_at) - exchange.started)

    def _end_active(self, route: Routed) -> None:
        if route.url is not None and self.router is not None:
            self.router.end(route.url)
            return
        self.active -= 1
        if self.active == 0:
            self._idle.set()

    @staticmethod
    def _reject(responder: Responder, exchange: Exchange, status: int, message: str,
                kind: str = "unavailable_error") -> None:
        exchange.finish(status, message)
        responder.error(status, message, kind)

    def status(self) -> dict[str, Any]:
        found: dict[str, Any] = {"backend": self.backend.url, "profile": self.backend.profile,
                                 "in_flight": self.in_flight, "active": self.active, "paused": self.paused,
                                 "healthy": self.gate.healthy}
        if self.router is not None:
            found["routing"] = self.router.status()
        return found

    def _finished(self, exchange: Exchange, status: int, total_s: float, error: str | None) -> None:
        self.in_flight -= 1
        if self._metrics is not None:
            self._metrics.in_flight.set(self.in_flight)
        self._recording(exchange, status, total_s, exchange.error or error)
