"""The alias endpoint clients talk to: an OpenAI-compatible pass-through that hides switches.

A switch restarts llama-server; a client talking to it directly sees refused connections and
"Loading model" 503s. Through the proxy it sees latency instead: a request that cannot reach a
healthy backend waits at a gate (the *hold*, specd.proxy.gate) until the backend answers `/health`
or the hold timeout passes. What is re-sent and what is answered with an error is the re-send rule,
all of it in specd.proxy.resend (this module only does what its verdicts say).
`pause`/`wait_idle`/`resume` let a switch drain in-flight streams before the restart (the daemon
serves them on its control socket; see `specd.daemon.control`). Headers pass through untouched (auth
included) and are never logged or stored; traffic rows keep only the shape (specd.proxy.exchange). A
request dropped by a server that then stops answering /health (before answering or mid-stream) is
reported as the likely cause of the crash (`on_crash`, see specd.proxy.crashes); a shutdown answers
held and unanswered requests 503 (at once, and at the end of its grace) and cuts streams on an event
boundary.

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
from collections.abc import Callable, Coroutine
from typing import Any

from specd.proxy import resend
from specd.proxy.attempts import Attempts
from specd.proxy.bodies import BodyReader
from specd.proxy.crashes import Crash, CrashWatch, DroppedRequest, Phase
from specd.proxy.exchange import Exchange, Recording
from specd.proxy.gate import BackendGate, HoldExpired
from specd.proxy.http1.bodies import Body, HeldBytes
from specd.proxy.http1.client import UpstreamPool, answers_health_now, forwarded_headers
from specd.proxy.http1.listener import FrontServer
from specd.proxy.http1.responder import Responder
from specd.proxy.http1.response import UpstreamFailed, UpstreamResponse
from specd.proxy.http1.server import ClientRequest, FrontLimits
from specd.proxy.metrics import ProxyMetrics
from specd.proxy.relay import ClientWatch, Relay, read_whole, respond, start_stream
from specd.proxy.routes import Routed, Router
from specd.proxy.settings import Backend, ProxySettings  # defined there; imported from here too
from specd.proxy.warmup import RecentRequests
from specd.traffic.capture import BodyCapture
from specd.traffic.records import Recorder
from specd.traffic.shape import RequestShape

log = logging.getLogger(__name__)
SHUTTING_DOWN = "specd proxy is shutting down"


class _ShutDownWhileWaiting(Exception):
    """The shutdown's grace ended while this request waited for the backend's status line."""


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
        held: HeldBytes | None = None,
        router: Router | None = None,
    ) -> None:
        self.settings = settings
        self._resolve = resolve_backend
        self.router = router  # routing across resident profiles (specd.proxy.routes); None: one server
        self._metrics, self._capture = metrics, capture
        self._recording = Recording(settings.unit, recorder, metrics)
        self._upstream = UpstreamPool()
        self._held = held or HeldBytes()  # request bytes held for clients, daemon-wide (the daemon shares one)
        self._reader = BodyReader()
        self._attempts = Attempts(router, self._reader)  # where each request goes, who talks to which server
        self._crashes = CrashWatch(lambda: answers_health_now(self.backend.url), self.mark_unhealthy, on_crash)
        self.backend = resolve_backend()
        self.in_flight = 0      # requests accepted and not yet answered (held ones included)
        self.accepted = 0       # requests accepted since start (the nightly run watches for clients)
        self.gate = BackendGate(self._probe_backend, poll_s=settings.health_poll_s)
        self._relays: set[Relay] = set()
        self._waiting: set[asyncio.Task[None]] = set()  # requests sent upstream, no status line yet
        self._cut: set[asyncio.Task[None]] = set()  # ... of which the shutdown cancelled these
        self.recent = RecentRequests()  # what a blue-green flip warms the new server's cache with

    # ---- the server and its lifecycle -----------------------------------------------------------

    def server(self, grace_s: float = 30.0) -> FrontServer:
        """The server that takes clients' connections for this proxy (`serve`, `started`, `should_exit`)."""
        limits = FrontLimits(self.settings.max_body_bytes, self.settings.body_timeout_s,
                             self.settings.header_timeout_s, held=self._held)
        return FrontServer(self.handle, limits, grace_s=grace_s, on_stop=self.stop,
                           max_connections=self.settings.max_connections)

    async def stop(self) -> None:
        self.gate.stop()
        if self.router is not None:
            self.router.stop()
        self._upstream.close()
        self._reader.close()
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

    @property
    def _primary_open(self) -> bool:
        """The primary takes requests now (routing sends a held class to a companion that is up)."""
        return self.gate.open and not self.gate.paused

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

    @property
    def active(self) -> int:
        """Requests past the gate, talking to the primary (a drain waits for none)."""
        return self._attempts.active

    async def wait_idle(self, timeout_s: float) -> bool:
        return await self._attempts.wait_idle(timeout_s)

    async def _probe_backend(self) -> bool:
        """The gate's poll: re-resolve the backend (a switch may have moved it), then /health."""
        self.backend = await asyncio.to_thread(self._resolve)
        return await self._upstream.healthy(self.backend.url)

    # ---- requests -----------------------------------------------------------------------------

    def handle(self, request: ClientRequest, responder: Responder) -> Coroutine[Any, Any, None]:
        """Take one whole request: specd.proxy.http1.server calls this the moment the request is whole and
        runs what it returns as the request's task. With the gate open and a pooled connection idle,
        the request leaves for the backend here and now; reading its shape, recording and the rest
        happen in the task while the backend works (every step before the send is added latency)."""
        headers = forwarded_headers(request.headers)
        route = self._attempts.route_now(request, self.backend, self._primary_open)
        sent = None
        if route is not None and (self.gate.open or route.url is not None) and not self.shutting_down:
            sent = self._upstream.send_now(request.method, route.url or self.backend.url, request.target, headers,
                                           route.body)
            if sent is not None:
                self._attempts.begin(route)
        return self._handle(request, responder, headers, sent, route)

    async def _handle(self, request: ClientRequest, responder: Responder, headers: bytes,
                      sent: UpstreamResponse | None, route: Routed | None) -> None:
        if self.shutting_down and sent is None:
            responder.error(503, SHUTTING_DOWN)
            return
        path, body = request.path, request.body
        exchange = Exchange.of_request(request.method, path, self.in_flight, self._finished, started=request.received)
        shape = self._reader.read_now(body) if request.method == "POST" else RequestShape()
        self.in_flight += 1
        self.accepted += 1
        if self._metrics is not None:
            self._metrics.in_flight.set(self.in_flight)
        watch = ClientWatch(responder)
        try:
            exchange.take(shape if shape is not None else await self._read_off_loop(body, sent, route))
            self._remember(exchange, body)
            if route is None:  # routing needs a body too big to parse on the loop: parsed on the worker
                route = await self._attempts.route_off_loop(request, self.backend, self._primary_open)
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

    async def _read_off_loop(self, body: Body, sent: UpstreamResponse | None, route: Routed | None
                             ) -> RequestShape:
        """A big body's shape, read on the reader's thread while the backend (if `sent`) works."""
        try:
            return await self._reader.read(body)
        except BaseException:  # the client left: a request sent as it arrived is abandoned here
            if sent is not None and route is not None:
                sent.close()
                self._attempts.end(route)
            raise

    def _remember(self, exchange: Exchange, body: Body) -> None:
        """A body read as a JSON object: the next warm-up's, and a captured one (when capture is on)."""
        self.recent.note(exchange.endpoint, exchange.shape, body)
        if (self._capture is not None and body and exchange.shape.read
                and exchange.endpoint.endswith("/chat/completions")):
            self._capture.submit(body, in_flight=exchange.in_flight)

    async def _forward(self, request: ClientRequest, headers: bytes, exchange: Exchange, responder: Responder,
                       watch: ClientWatch, sent: UpstreamResponse | None, route: Routed) -> None:
        """Get the request answered: through the gate (the primary's; a companion has none), to the
        backend, re-sent by the re-send rule — a companion that fails it hands the request to the primary."""
        deadline = exchange.started + self.settings.hold_timeout_s
        read_timeout_s = self.settings.stream_idle_timeout_s if exchange.stream else None
        loading: bytes | None = None  # the backend's own 503 body ("Loading model"), if that is all we got
        rule = resend.Resends()
        fresh = False  # the next attempt goes on a new connection (the rule said so)
        while True:
            if not await self._through_gate(deadline, exchange, responder, loading, sent, route):
                return
            first, sent = sent, None
            try:
                try:
                    upstream = await self._send_upstream(
                        request, headers, route, read_timeout_s, first,
                        functools.partial(start_stream, exchange=exchange, responder=responder, watch=watch,
                                          relays=self._relays), fresh=fresh)
                except UpstreamFailed as failed:
                    outcome: resend.Outcome = failed.outcome
                    cause, reused = failed.cause_name, failed.reused
                except _ShutDownWhileWaiting:
                    self._reject(responder, exchange, 503, SHUTTING_DOWN)
                    return
                else:
                    if upstream.status != 503:
                        await respond(upstream, exchange, responder, watch, self._relays)
                        if exchange.failed_status == 502:  # the backend dropped the answer: did it go down on it?
                            await self._dropped_mid_stream(request, exchange, route)
                        return
                    outcome, cause, reused = "loading", "503", upstream.reused
                    answered_503 = await read_whole(upstream)
                    loading = answered_503 if route.url is None else loading  # a companion's is not the primary's
            finally:
                self._attempts.end(route)
            answers = False
            if outcome == "dropped":  # always judged: a server that went down names this request
                answers, cause = await self._judge_drop(request, exchange, cause, route)
            verdict = rule.after(outcome, reused=reused, answers_health_now=answers)
            tried = route.url or self.backend.url
            if verdict.mark_unhealthy:
                route = self._unhealthy(route)
            if not self._follow(verdict, request, exchange, responder, cause, tried):
                return
            fresh = fresh or verdict.fresh_connection

    def _follow(self, verdict: resend.Verdict, request: ClientRequest, exchange: Exchange, responder: Responder,
                cause: str, tried: str) -> bool:
        """Do what the re-send rule said (its mark_unhealthy done by `_unhealthy`): True to send again,
        False once the client got its error. `tried`: the server the attempt went to."""
        if verdict.resend:
            if verdict.fresh_connection:
                self._upstream.discard_idle(tried)
                log.info("%s %s: re-sent once on a fresh connection (%s)", request.method, request.path, cause)
            if self._metrics is not None:
                self._metrics.retries.inc()
            return True
        assert verdict.status is not None
        exchange.error = f"{verdict.reason} ({cause})"
        log.warning("%s %s: %s", request.method, request.path, exchange.error)
        self._reject(responder, exchange, verdict.status, exchange.error, "api_error")
        return False

    async def _dropped_mid_stream(self, request: ClientRequest, exchange: Exchange, route: Routed) -> None:
        """The primary names the request it went down on (specd.proxy.crashes); a companion is marked down."""
        if self._attempts.companion_failed(route, self.backend.profile) is None:
            await self._crashes.survived(self._dropped(request, exchange, "mid-stream"))

    def _unhealthy(self, route: Routed) -> Routed:
        """The attempt's server is down: a companion is marked down and the request goes to the primary
        (so do the next ones until its /health answers); the primary closes its gate."""
        moved = self._attempts.companion_failed(route, self.backend.profile)
        if moved is None:
            self.mark_unhealthy()
        return moved or route

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
                self._attempts.begin(route)
            self._note_attempt(exchange, route, sent.sent_at if sent is not None else None)
            return True
        try:
            await self.gate.pass_through(deadline, self.settings.hold_timeout_s, self._metrics)
        except HoldExpired as expired:
            exchange.hold_ended()  # held all along, then refused
            if loading is not None:  # the backend's own 503 ("Loading model") says most
                exchange.finish(503, "held past the hold timeout: the backend still answered 503")
                responder.answer(503, [(b"content-type", b"application/json")], loading)
            else:
                self._reject(responder, exchange, 503, str(expired))
            return False
        if self.shutting_down:  # checked after the gate: a shutdown lets held requests go, to a 503
            exchange.hold_ended()
            self._reject(responder, exchange, 503, SHUTTING_DOWN)
            return False
        self._attempts.begin(route)
        self._note_attempt(exchange, route)
        return True

    async def _send_upstream(self, request: ClientRequest, headers: bytes, route: Routed,
                             read_timeout_s: float | None, sent: UpstreamResponse | None,
                             on_status: Callable[[UpstreamResponse], None], *, fresh: bool = False
                             ) -> UpstreamResponse:
        """Send (unless `sent` already went) and wait for the status line, `on_status` run the moment
        it arrives; a shutdown at the end of its grace cuts that wait (answered 503)."""
        task = asyncio.current_task()
        assert task is not None
        self._waiting.add(task)
        try:
            if sent is None:
                return await self._upstream.send(request.method, route.url or self.backend.url, request.target,
                                                 headers, route.body, read_timeout_s, on_status, fresh=fresh)
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

    def _note_attempt(self, exchange: Exchange, route: Routed, sent_at: float | None = None) -> None:
        """An attempt is under way: held from arrival until sent (`sent_at`, or now)."""
        exchange.profile = route.profile if route.url is not None else self.backend.profile
        exchange.hold_ended(sent_at)

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
