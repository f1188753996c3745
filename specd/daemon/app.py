"""`specd daemon`: the long-running guard of every configured deployment.

Wiring only; the work lives in `monitor` (health), `watcher` (files), `specd.proxy` (clients),
`traffic` (records), `metrics`, `control` (the socket switches drain through), `observer` (what
changed in history, for the page and the notifications) and `notifications`. The status page
(`specd.web`, a front end above this layer) and the tuner's jobs (`specd.tune`, above too) are
handed in as factories by `specd daemon` from the composition root.

Threads: the asyncio loop in the main thread serves the proxies and the control socket, pings
systemd's watchdog and writes the status file (so a wedged loop stops the pings and systemd
restarts us); APScheduler's thread pool runs the blocking jobs (health rounds, metrics sampling
when there is no proxy, housekeeping, the nightly tuning); watchdog's observer threads feed the
watcher. SIGTERM stops the jobs, lets proxied streams finish for a grace period, cuts the rest on
an event boundary, flushes the traffic writer, and exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from apscheduler.schedulers.background import BackgroundScheduler

from specd.daemon import control, service
from specd.daemon.control import daemon_status
from specd.daemon.metrics import CONTENT_TYPE, SpecdMetrics
from specd.daemon.monitor import HealthMonitor
from specd.daemon.nightly import NO_TUNER_JOBS, TunerJobs, cron_trigger
from specd.daemon.notifications import Notifier
from specd.daemon.observer import HistoryObserver
from specd.daemon.service import Server, bind_tcp, keep_pinging, make_server, notify, watchdog_interval_s
from specd.daemon.steering import ProxySteering, backend_of, refresh_routes, routes_of
from specd.daemon.upkeep import SAMPLE_INTERVAL_S, housekeeping, sample_counters
from specd.daemon.watcher import DeploymentWatcher
from specd.deploy.health import HealthResult
from specd.deploy.history import History
from specd.deploy.seams import SeamsFactory
from specd.deploy.slots import serving_slot
from specd.endpoint import http_client
from specd.errors import ConfigError, SpecdError
from specd.paths import StateDir
from specd.profiles.config import Config, Deployment
from specd.proxy import heap
from specd.proxy.crashes import Crash
from specd.proxy.http1.bodies import HeldBytes
from specd.proxy.proxy import Proxy
from specd.proxy.routes import Router
from specd.proxy.settings import ProxySettings
from specd.traffic import records as traffic
from specd.traffic.capture import BodyCapture

__all__ = ["Daemon", "daemon_status", "notify", "run_daemon"]

log = logging.getLogger("specd.daemon.app")

SHUTDOWN_GRACE_S = 20.0   # in-flight streams get this long after SIGTERM (below TimeoutStopSec)
HEARTBEAT_S = 5.0        # status file and watchdog cadence (control.STALE_AFTER_S relies on it)


class StatusPage(Protocol):
    """The status page as the daemon sees it (`specd.web.app.StatusPage`): an ASGI app to serve,
    a place to publish live events, something to close on shutdown."""

    app: Any

    def publish(self, name: str, /, **data: Any) -> None: ...

    def close(self) -> None: ...


# (config, deployments, *, status, submit, loop) -> the page; `specd daemon` passes specd.web's
PageFactory = Callable[..., StatusPage]


@dataclass
class Runtime:
    """What the daemon runs for one deployment."""

    deployment: Deployment
    monitor: HealthMonitor
    watcher: DeploymentWatcher
    proxy: Proxy | None = None
    server: Server | None = None
    info: dict[str, Any] = field(default_factory=dict)
    last_generation: int = 0
    last_outcome: str = ""  # of last_generation: a pending switch is seen again when it finishes


class Daemon:
    def __init__(self, config: Config, deployments: list[Deployment] | None = None, *, state: StateDir,
                 make_seams: SeamsFactory, page_factory: PageFactory | None = None,
                 jobs: TunerJobs = NO_TUNER_JOBS) -> None:
        self.config = config
        self._jobs = jobs  # the tuner's, from the composition root (specd.daemon.nightly)
        self.deployments = deployments or list(config.deployments)
        self.state = state
        self._make_seams = make_seams
        self.metrics = SpecdMetrics()
        self.history = History(state.db)  # the event loop's connection; jobs and watchers have their own
        self.recorder: traffic.Recorder | None = None
        # Request bodies held for clients, bounded across every proxy; their memory goes back after a burst.
        self.held_bodies = HeldBytes(config.daemon.max_held_body_bytes, on_release=heap.Trimmer().released)
        self.scheduler = BackgroundScheduler(job_defaults={"coalesce": True, "max_instances": 1,
                                                           "misfire_grace_time": 60})
        self.runtimes: dict[str, Runtime] = {}
        self.started_at = time.time()
        self._servers: list[tuple[Server, asyncio.Task[None]]] = []
        self._lock_fd: int | None = None
        self._http = http_client(5.0)  # TCP or a Unix socket (specd.endpoint)
        self.page: StatusPage | None = None  # when [daemon] http_listen is set
        self._page_factory = page_factory
        self.notifier: Notifier | None = None
        self.observer: HistoryObserver | None = None

    # ---- startup --------------------------------------------------------------------------------

    def _build(self) -> None:
        if self.config.notify.urls:
            self.notifier = Notifier(self.config.notify)
        if any(d.proxy is not None for d in self.deployments):
            self.recorder = traffic.Recorder(self.state.db)
        for deployment in self.deployments:
            unit = deployment.unit
            self.metrics.add_unit(unit)
            monitor = HealthMonitor(self._make_seams(deployment), self.config.daemon,
                                    on_result=partial(self._health_result, unit),
                                    on_action=partial(self._count_action, unit))
            watcher = DeploymentWatcher(self._make_seams(deployment),
                                        on_profile_errors=partial(self._profile_errors, unit),
                                        on_external_edit=partial(self._external_edit, unit))
            runtime = Runtime(deployment, monitor, watcher)
            if deployment.proxy is not None:
                runtime.proxy = self._make_proxy(deployment)
            self.runtimes[unit] = runtime

    def _make_proxy(self, deployment: Deployment) -> Proxy:
        settings = deployment.proxy
        assert settings is not None
        backend = backend_of(deployment, self.state, refuse_socket=True)
        if backend.url.endswith(f":{settings.listen_port}") and settings.listen_host in backend.url:
            raise ConfigError(f"[proxy] listen {settings.listen_host}:{settings.listen_port} is {deployment.unit}'s "
                              "own address; give the proxy another port")
        capture = (BodyCapture(self.state.capture(deployment.name), settings.capture_max_bytes)
                   if settings.capture_bodies else None)
        return Proxy(ProxySettings(hold_timeout_s=settings.hold_timeout_s, unit=deployment.unit),
                     lambda: backend_of(deployment, self.state), recorder=self.recorder, metrics=self.metrics,
                     capture=capture, on_crash=partial(self._crash_after_request, deployment.unit),
                     held=self.held_bodies, router=Router(lambda: routes_of(deployment, self.state)))

    async def _serve(self, app: Any, *, host: str | None = None, port: int = 0,
                     uds: Path | None = None, setting: str = "[proxy] listen") -> Server:
        """Serve an ASGI app with uvicorn, or a proxy with its own server (specd.proxy.http1)."""
        server: Server = (app.server(SHUTDOWN_GRACE_S) if isinstance(app, Proxy)
                          else make_server(app, host=host, port=port, uds=uds, grace_s=SHUTDOWN_GRACE_S))
        sockets = None if uds is not None else [bind_tcp(host or "127.0.0.1", port, setting)]
        task = asyncio.get_running_loop().create_task(server.serve(sockets=sockets))
        while not server.started:
            if task.done():
                raise SpecdError(f"the server on {uds or f'{host}:{port}'} did not start")
            await asyncio.sleep(0.02)
        self._servers.append((server, task))
        return server

    def _schedule(self) -> None:
        daemon, now = self.config.daemon, datetime.now(UTC)  # the interval jobs' first run: at once
        for unit, runtime in self.runtimes.items():
            self.scheduler.add_job(self._job(f"health {unit}", runtime.monitor.tick), "interval",
                                   seconds=daemon.health_interval_s, id=f"health:{unit}", next_run_time=now)
            if runtime.proxy is None:
                sample = partial(sample_counters, self._http, self.state, runtime.deployment, runtime.info)
                self.scheduler.add_job(self._job(f"sample {unit}", sample), "interval",
                                       seconds=SAMPLE_INTERVAL_S, id=f"sample:{unit}", next_run_time=now)
            if self._jobs.schedule is not None:
                schedule = self._jobs.schedule(runtime.deployment, self._make_seams)
                self.scheduler.add_job(self._job(f"schedule {unit}", schedule), "interval",
                                       seconds=daemon.schedule_check_s, id=f"schedule:{unit}", next_run_time=now)
        upkeep = partial(housekeeping, self.state, self.deployments)
        self.scheduler.add_job(self._job("housekeeping", upkeep), "interval",
                               seconds=daemon.housekeeping_interval_s, id="housekeeping")
        if self.config.tuner.enabled and self._jobs.nightly is not None:
            trigger = cron_trigger(self.config.tuner.cron, self.config.path)
            for unit, runtime in self.runtimes.items():
                proxy = runtime.proxy
                clients = None if proxy is None else (lambda proxy=proxy: (proxy.accepted, proxy.in_flight))
                nightly = self._jobs.nightly(self.config, runtime.deployment, clients, self._make_seams)
                self.scheduler.add_job(self._job(f"tune {unit}", nightly), trigger, id=f"tune:{unit}")

    def _job(self, name: str, work: Callable[[], object]) -> Callable[[], None]:
        def run() -> None:
            try:
                work()
            except SpecdError as exc:
                log.error("%s: %s", name, exc)
            except Exception:  # a job's bug must not stop the daemon's other jobs
                log.exception("%s failed", name)
        return run

    # ---- jobs and callbacks -----------------------------------------------------------------------

    def _health_result(self, unit: str, result: HealthResult) -> None:
        self.metrics.healthy.labels(unit).set(1 if result.ok else 0)
        self.metrics.health_checks.labels(unit, "ok" if result.ok else "failed").inc()
        if self.page is not None:
            self.page.publish("health", unit=unit, ok=result.ok, detail=result.detail)

    def _relayed_step(self, unit: str, step: str, detail: str) -> None:
        """A step of a switch run elsewhere (the CLI), for the page's live view."""
        if self.page is not None:
            self.page.publish("step", action=None, unit=unit, step=step, detail=detail)

    def _submit(self, name: str, work: Callable[[], None]) -> None:
        """Run a page action on the job pool: SIGTERM waits for it like for a rollback in progress."""
        self.scheduler.add_job(self._job(name, work), id=name)

    def _external_edit(self, unit: str, generation_id: int) -> None:
        self.metrics.external_edits.labels(unit).inc()

    def _count_action(self, unit: str, action: str, detail: str) -> None:
        if action == "restart":
            self.metrics.restarts.labels(unit).inc()

    def _crash_after_request(self, unit: str, crash: Crash) -> None:
        """History names the request the server went down on (the proxy logged it to the journal)."""
        try:
            self.history.event(unit, "crash-after-request", crash.describe())
        except SpecdError as exc:
            log.error("%s: cannot record the crash in the history: %s", unit, exc.message)

    def _profile_errors(self, unit: str, errors: dict[str, str]) -> None:
        self.metrics.profile_errors.labels(unit).set(len(errors))

    def _observe_generations(self) -> None:
        for unit, runtime in self.runtimes.items():
            newest = next(iter(self.history.list(unit, limit=1)), None)
            if newest is None or (newest.id, newest.outcome) == (runtime.last_generation, runtime.last_outcome):
                continue
            if runtime.last_generation and newest.outcome == "ok":  # finished now (seen pending before, or not)
                counter = self.metrics.rollbacks if newest.kind == "rollback" else self.metrics.switches
                counter.labels(unit).inc()
            runtime.last_generation, runtime.last_outcome = newest.id, newest.outcome
            active = self.history.active(unit)  # a pending, reverted or failed generation is not active
            self.metrics.set_active_profile(unit, active.profile if active else None)

    # ---- the control socket (its drain and retarget work is specd.daemon.steering) ---------------------

    def status(self) -> dict[str, Any]:
        self._observe_generations()
        tune_jobs = [j for j in self.scheduler.get_jobs() if j.id.startswith("tune:")] if self.scheduler.running else []
        next_runs = sorted(j.next_run_time for j in tune_jobs if j.next_run_time is not None)
        units = {}
        for unit, runtime in self.runtimes.items():
            proxy, listen = runtime.proxy, runtime.deployment.proxy
            serving = serving_slot(self.state, runtime.deployment)
            units[unit] = {
                "slot": serving.name, "slot_unit": serving.unit,
                "health": runtime.monitor.state.as_dict(),
                "profile_errors": runtime.watcher.profile_errors,
                "proxy": None if proxy is None or listen is None else {
                    "listen": f"{listen.listen_host}:{listen.listen_port}", **proxy.status()},
            }
        return {"running": True, "pid": os.getpid(), "started_at": self.started_at, "heartbeat_at": time.time(),
                "next_tuning": next_runs[0].isoformat() if next_runs else None, "units": units}

    def _write_status(self, running: bool = True) -> None:
        control.write_daemon_status(self.state, {**self.status(), "running": running})

    # ---- lifecycle -------------------------------------------------------------------------------

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        self._lock_fd = control.take_daemon_lock(self.state)
        self._build()
        sock = self.state.daemon_socket
        sock.unlink(missing_ok=True)
        steering = ProxySteering(self.state, {unit: (runtime.deployment, runtime.proxy)
                                              for unit, runtime in self.runtimes.items() if runtime.proxy is not None})
        control_app = functools.partial(control.control_app, drain_unit=steering.drain, renew_unit=steering.renew,
                                        resume_unit=steering.resume, on_step=self._relayed_step, status=self.status,
                                        metrics=self.metrics.render, metrics_content_type=CONTENT_TYPE,
                                        retarget_unit=steering.retarget, reroute_unit=steering.reroute)
        await self._serve(control_app(), uds=sock)
        os.chmod(sock, 0o600)
        metrics_listen = self.config.daemon.metrics_listen  # "host:port", read-only routes
        if isinstance(metrics_listen, str) and metrics_listen:
            host, _, port = metrics_listen.rpartition(":")
            await self._serve(control_app(writable=False), host=host.strip("[]"), port=int(port),
                              setting="[daemon] metrics_listen")
        for runtime in self.runtimes.values():
            if runtime.proxy is not None and runtime.deployment.proxy is not None:
                listen = runtime.deployment.proxy
                runtime.server = await self._serve(runtime.proxy, host=listen.listen_host,
                                                   port=listen.listen_port)
        await self._serve_page(loop)
        self.observer = HistoryObserver(self.deployments, history=History(self.state.db), notifier=self.notifier,
                                        publish=self.page.publish if self.page is not None else None,
                                        health_lost_s=self.config.notify.health_lost_minutes * 60.0)
        observing = loop.create_task(self.observer.run(
            lambda: {unit: runtime.monitor.state for unit, runtime in self.runtimes.items()}, stop))
        for runtime in self.runtimes.values():
            runtime.watcher.start()
        self._schedule()
        self.scheduler.start()
        self._write_status()
        # Everything loaded so far lives as long as the daemon: a full collection walked it all on the
        # event loop (about 60 ms here), a stall every stream through the proxy felt as a late token.
        gc.freeze()
        notify(f"READY=1\nSTATUS=guarding {', '.join(self.runtimes)}")
        log.info("specd daemon ready: %s", ", ".join(self.runtimes))
        watchdog = watchdog_interval_s()
        beat = min(HEARTBEAT_S, watchdog / 2) if watchdog else HEARTBEAT_S
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), beat)
            if watchdog and self.scheduler.running:
                notify("WATCHDOG=1")
            await refresh_routes({r.deployment.unit: r.proxy for r in self.runtimes.values()})
            try:
                self._write_status()
            except Exception:  # out of file descriptors, a full disk: the heartbeat goes on
                log.exception("writing the status file failed")
        pinger = loop.create_task(keep_pinging(beat)) if watchdog else None  # shutdown may outlast it
        await observing
        await self._shutdown()
        if pinger is not None:
            pinger.cancel()
        return 0

    async def _serve_page(self, loop: asyncio.AbstractEventLoop) -> None:
        listen = self.config.daemon.http_listen
        if not listen or self._page_factory is None:
            return
        self.page = self._page_factory(self.config, self.deployments, status=self.status, submit=self._submit,
                                       loop=loop)
        host, _, port_text = listen.rpartition(":")
        host, port = host.strip("[]"), int(port_text)
        await self._serve(self.page.app, host=host, port=port, setting="[daemon] http_listen")
        log.info("status page on http://%s:%d/ (`specd web-token` for actions)", host, port)

    async def _shutdown(self) -> None:
        notify("STOPPING=1\nSTATUS=finishing in-flight requests")
        started = time.monotonic()
        log.info("specd daemon stopping")
        for runtime in self.runtimes.values():
            runtime.watcher.stop()
        with contextlib.suppress(TimeoutError):  # a rollback in progress gets its time, within reason
            await asyncio.wait_for(asyncio.to_thread(self.scheduler.shutdown, True), SHUTDOWN_GRACE_S)
        log.info("jobs stopped after %.1f s", time.monotonic() - started)
        proxies = [r.proxy for r in self.runtimes.values() if r.proxy is not None]
        if self.page is not None:
            self.page.close()  # ends the live event streams, which would hold their server open
        proxy_servers = [r.server for r in self.runtimes.values() if r.server is not None]
        for server in proxy_servers:
            server.should_exit = True
        await asyncio.gather(*(p.shutdown(SHUTDOWN_GRACE_S) for p in proxies))
        log.info("proxies drained after %.1f s", time.monotonic() - started)
        for server, _ in self._servers:  # the control socket last: a switch's drain call gets its answer
            server.should_exit = True
        await asyncio.gather(*(task for _, task in self._servers), return_exceptions=True)
        if self.recorder is not None:
            self.recorder.close()
        for runtime in self.runtimes.values():
            runtime.monitor.close()
        if self.observer is not None:
            self.observer.close()
        if self.notifier is not None:
            self.notifier.close()
        self._write_status(running=False)
        self.state.daemon_socket.unlink(missing_ok=True)
        self._http.close()
        log.info("specd daemon stopped after %.1f s", time.monotonic() - started)


def run_daemon(config: Config, deployments: list[Deployment] | None = None, *, state: StateDir,
               make_seams: SeamsFactory, page_factory: PageFactory | None = None,
               jobs: TunerJobs = NO_TUNER_JOBS) -> int:
    logging.getLogger("specd").setLevel(logging.INFO)
    logging.getLogger("apscheduler").setLevel(logging.ERROR)  # "skipped: already running" is not news
    service.raise_open_files_limit()  # before the proxies size their connection caps on it
    heap.keep_big_blocks_apart()  # before any body arrives (specd.proxy.heap)
    with asyncio.Runner(loop_factory=service.new_event_loop) as runner:
        return runner.run(Daemon(config, deployments, state=state, make_seams=make_seams,
                                 page_factory=page_factory, jobs=jobs).run())
