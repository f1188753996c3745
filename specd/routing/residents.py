"""Turning routing on and off: companion servers started beside the serving slot, and stopped again.

`on`: under the deployment's lock, each profile to keep resident (`[routing] profiles`, else those
the routing table names, less the one the serving slot runs) passes preflight, gets a port of its
own, must fit beside every server that runs (specd.deploy.capacity: VRAM now, or RAM and every
thread pool on the cores), and is started as a companion unit (specd.deploy.companions) and
health-gated on its port like a switch's new server. Only then does the routing state name it and
the daemon's proxy re-read the state: until that moment clients see nothing of it. A companion that
fails its gate is stopped and its unit removed, and nothing else changes. In `auto` mode, when the
serving profile speculates, the binary is asked first (specd.routing.probe): if it honours
per-request draft settings, no companion is started and the classes' settings are stamped on
requests instead.

`off`: the state says off first, the proxy re-reads it and answers once nothing is in flight to a
companion (streams finish where they started), then each companion is stopped and its unit
removed: clients never see a failed request. The routing state file is the truth about companions:
a companion unit it does not name (an `on` killed half-way) is stopped and removed by the next
`on`/`off` (`reconcile`). Every step is told to `on_step` and passes a named fault point
(`SPECD_FAULT=route-start` ...) for the crash tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace

import httpx

from specd.deploy.capacity import CapacityCheck, capacity_check
from specd.deploy.companions import companion_commands, companion_path, companion_unit, companion_units
from specd.deploy.health import wait_healthy
from specd.deploy.load import wait_until_idle
from specd.deploy.plan import HealthGate, PreflightRunner
from specd.deploy.preflight import Preflight, port_holders, run_preflight
from specd.deploy.seams import Seams
from specd.deploy.slots import port_of, spare_port, with_port
from specd.deploy.unitfiles import atomic_write, read_text
from specd.durable import checkpoint
from specd.endpoint import http_client, tcp_port
from specd.errors import PreflightError, SpecdError, UsageError
from specd.profiles.load import load_profile
from specd.routing.probe import ProbeResult, probe
from specd.routing.stamp import stamps_for
from specd.routing.state import Resident, RoutingState, read_state, write_state
from specd.routing.table import RoutingTable, describe
from specd.unit.parse import parse_unit
from specd.unit.render import profile_of_unit

STEPS = ("route-preflight", "route-write", "route-reload", "route-start", "route-gate", "route-enable", "route-state",
         "route-proxy")
OFF_STEPS = ("route-state", "route-proxy", "route-drain", "route-stop", "route-remove")
Prober = Callable[[str, str | None, str | None], ProbeResult]  # (base URL, alias, api key) -> verdict


def _probe(base_url: str, alias: str | None, api_key: str | None) -> ProbeResult:
    with http_client(httpx.Timeout(120.0, connect=2.0)) as client:
        return probe(client, base_url, alias, api_key)


@dataclass
class Routing:
    """Routing operations on one deployment, over its seams (tests pass fakes for the side effects)."""

    seams: Seams
    gate: HealthGate = wait_healthy
    preflight: PreflightRunner = run_preflight
    capacity: CapacityCheck | None = None
    prober: Prober = _probe
    ports_in_use: Callable[[int], set[int]] = port_holders
    on_step: Callable[[str, str], None] | None = None
    notes: list[str] = field(default_factory=list)

    def _passed(self, step: str, detail: str) -> None:
        self.notes.append(f"{step}: {detail}")
        if self.on_step is not None:
            self.on_step(step, detail)
        checkpoint(step)

    @property
    def _check(self) -> CapacityCheck:
        deployment = self.seams.deployment
        return self.capacity or capacity_check(self.seams.nvml, beside=lambda: companion_commands(deployment))

    # -- reading ---------------------------------------------------------------------------------

    def state(self) -> RoutingState:
        return read_state(self.seams.state, self.seams.unit)

    def serving_profile(self) -> tuple[str | None, str | None]:
        """(the serving slot's profile, its unit text), when a server is installed there."""
        text = read_text(self.seams.serving().unit_path)
        return (profile_of_unit(text) if text else None), text

    # -- on ------------------------------------------------------------------------------------

    def on(self, profiles: Sequence[str] = (), *, table: RoutingTable | None = None) -> RoutingState:
        """Keep `profiles` (else `[routing] profiles`, else the table's) resident beside the serving one."""
        with self.seams.lock("route on"):
            self.reconcile()
            current = self.state()
            table = table or current.table
            primary, text = self.serving_profile()
            serving = self.seams.serving()
            if primary is None or text is None or not self.seams.systemd.unit_state(serving.unit).running:
                raise UsageError("routing needs a server that runs: nothing serves now",
                                 hint="`specd switch PROFILE` first")
            wanted = [p for p in (profiles or self.seams.deployment.routing.profiles or table.profiles())
                      if p != primary]
            wanted = list(dict.fromkeys(wanted))
            if not wanted:
                raise UsageError(f"nothing to route to: the routing table names no profile besides the serving "
                                 f"{primary}", hint="learn one (`specd route learn`) or name them: "
                                                    "`specd route on --profile a --profile b`")
            tcp_port(parse_unit(text, str(serving.unit_path)).base_url,
                     "routing (the proxy sends each request on to a server's port)")  # a socket: refused here
            per_request = self._per_request(primary, text, wanted, table)
            if isinstance(per_request, RoutingState):
                return per_request
            probed = per_request.as_json() if per_request is not None else current.probe
            residents = [r for r in current.residents if r.profile in wanted and self._runs(r.unit)]
            started: list[Resident] = []
            try:
                for name in wanted:
                    if any(r.profile == name for r in residents):
                        continue
                    resident = self._start(name, text)
                    started.append(resident)
                    residents.append(resident)
            except BaseException:
                for resident in started:
                    self._remove(resident.unit)
                raise
            routing = replace(current, on=True, mode="servers", residents=tuple(residents), table=table, stamps={},
                              probe=probed, changed_at=time.time(),
                              note=f"on: {', '.join(r.profile for r in residents)} resident beside {primary}")
            write_state(self.seams.state, self.seams.unit, routing)
            self._passed("route-state", routing.note)
            self._tell_proxy()
            for gone in current.residents:  # a profile the table no longer names: drained above, stopped now
                if gone not in residents:
                    self._remove(gone.unit)
            if not current.on or set(residents) != set(current.residents):  # a night that changes nothing says nothing
                self.seams.history.event(self.seams.unit, "route-on",
                                         f"{routing.note} | " + "; ".join(describe(table)))
            return routing

    def _per_request(self, primary: str, text: str, wanted: Sequence[str],
                     table: RoutingTable) -> RoutingState | ProbeResult | None:
        """Per-request mode when asked for or (auto) when the serving binary honours it; else the probe's
        verdict (or None: not probed), and routing runs servers."""
        mode = self.seams.deployment.routing.mode
        if mode == "servers":
            return None
        command = parse_unit(text, str(self.seams.serving().unit_path))
        found = self.prober(command.base_url, command.alias, command.api_key)
        self._passed("route-probe", f"{found.verdict}: {found.detail}")
        if not found.honoured:
            if mode == "per-request":
                raise PreflightError(f"[routing] mode = \"per-request\", but {primary}'s server does not honour "
                                     f"per-request draft settings: {found.detail}; nothing was changed",
                                     hint="mode = \"servers\" (or \"auto\") runs a companion server per profile")
            self.notes.append(f"per-request draft settings: {found.verdict} ({found.detail}); routing runs servers")
            return found
        deployment = self.seams.deployment
        speculative = {name: asdict(load_profile(deployment.profiles_dir, name).speculative)
                       for name in [primary, *wanted]}
        current = self.state()
        routing = replace(current, on=True, mode="per-request", residents=(), table=table,
                          stamps=stamps_for(table, speculative, primary), probe=found.as_json(),
                          changed_at=time.time(),
                          note=f"on, per request: {primary} serves every class with its class's draft settings")
        write_state(self.seams.state, self.seams.unit, routing)
        self._passed("route-state", routing.note)
        self._tell_proxy()
        for gone in current.residents:  # servers mode before: its companions drained above, stopped now
            self._remove(gone.unit)
        if not current.on or current.mode != "per-request":
            self.seams.history.event(self.seams.unit, "route-on", routing.note)
        return routing

    def _port(self, serving_text: str) -> int:
        """The first port for a companion that no server of this deployment holds and nothing listens on."""
        deployment = self.seams.deployment
        primary_port = port_of(serving_text)
        taken = {primary_port, spare_port(deployment, primary_port)}
        for command in companion_commands(deployment):
            taken.add(tcp_port(command.base_url, "a companion server"))
        port = deployment.routing.port or primary_port + 2
        while port in taken or self.ports_in_use(port):
            port += 1
            if port > 65535:
                raise PreflightError("no free port for a companion server above [routing] port")
        return port

    def _start(self, name: str, serving_text: str) -> Resident:
        deployment, systemd = self.seams.deployment, self.seams.systemd
        serving = self.seams.serving()
        pre: Preflight = self.preflight(deployment, name,
                                        current_main_pid=systemd.unit_state(serving.unit).main_pid)
        port = self._port(serving_text)
        text = with_port(pre.unit_text, port, name)
        fit = self._check(text, parse_unit(serving_text, str(serving.unit_path)))
        if not fit.fits:
            raise PreflightError(f"profile {name} does not fit beside the servers that run: {fit.reason}; "
                                 "nothing was changed", hint="give the profiles fewer `threads` (or less context), "
                                                             "or route on a box with room for both")
        self._passed("route-preflight", f"{name} on port {port}; {fit.reason}")
        unit = companion_unit(deployment, name)
        path = companion_path(deployment, unit)
        try:
            for secret, content in pre.secrets:
                atomic_write(secret, content.encode("utf-8"), mode=0o600)
            atomic_write(path, text.encode("utf-8"), fault_name="unit")
            self._passed("route-write", str(path))
            systemd.reset_failed(unit)
            systemd.reload()
            self._passed("route-reload", "systemd re-read the units")
            systemd.restart(unit)
            self._passed("route-start", unit)
            command = parse_unit(text, str(path))
            health = self.gate(command.base_url, command.alias, timeout_s=pre.profile.health_timeout_s,
                               stability_s=pre.profile.stability_s, unit_state=lambda: systemd.unit_state(unit),
                               api_key=command.api_key)
            self._passed("route-gate", f"{unit} healthy after {health.total_s:.1f} s")
            if systemd.is_enabled(serving.unit):  # after a reboot the companion serves again, as the slot does
                systemd.set_enabled(unit, True)
                self._passed("route-enable", f"{unit} starts at boot, as {serving.unit} does")
        except BaseException:
            self._remove(unit)
            raise
        return Resident(name, unit)

    # -- off -------------------------------------------------------------------------------------

    def off(self) -> RoutingState:
        """One server again: the proxy stops routing, then each companion stops once idle."""
        with self.seams.lock("route off"):
            current = self.state()
            leaving = sorted({r.unit for r in current.residents} | set(companion_units(self.seams.deployment)))
            routing = replace(current, on=False, residents=(), stamps={}, changed_at=time.time(),
                              note="off: one server serves every class")
            write_state(self.seams.state, self.seams.unit, routing)
            self._passed("route-state", routing.note)
            self._tell_proxy()
            for unit in leaving:
                self._remove(unit)
            if current.on or leaving:
                self.seams.history.event(self.seams.unit, "route-off",
                                         f"{routing.note} (stopped {', '.join(leaving) or 'nothing'})")
            return routing

    def set_table(self, table: RoutingTable, why: str) -> RoutingState:
        """A new table (learned, or written by hand): kept, shown, and used by the proxy at once."""
        with self.seams.lock("route table"):
            routing = replace(self.state(), table=table, changed_at=time.time())
            write_state(self.seams.state, self.seams.unit, routing)
            self._tell_proxy()
        self.seams.history.event(self.seams.unit, "route-table", f"{why} | " + "; ".join(describe(table)))
        return routing

    # -- companions ------------------------------------------------------------------------------

    def reconcile(self) -> list[str]:
        """Stop and remove companion units the routing state does not name (a killed `on` left them)."""
        named = {r.unit for r in self.state().residents}
        orphans = [u for u in companion_units(self.seams.deployment) if u not in named]
        for unit in orphans:
            self._remove(unit)
            self.notes.append(f"stopped and removed {unit}: a companion the routing state does not name")
        return orphans

    def _runs(self, unit: str) -> bool:
        """A listed companion that stopped (a crash systemd gave up on, a reboot without boot start) is
        started again by the next `on`."""
        try:
            return self.seams.systemd.unit_state(unit).running
        except SpecdError:
            return False

    def _tell_proxy(self) -> None:
        told = self.seams.proxy.reroute(self.seams.unit, self.seams.deployment.routing.drain_timeout_s)
        detail = ("the daemon's proxy re-read the routing state" if told else
                  "no daemon proxy answered: it reads the routing state when it starts" if told is None else
                  "the daemon's proxy re-read the routing state; requests were still in flight at the timeout")
        self._passed("route-proxy", detail)

    def _remove(self, unit: str) -> None:
        """Stop a companion once its own server reports nothing in progress, then remove its unit file."""
        systemd, deployment = self.seams.systemd, self.seams.deployment
        path = companion_path(deployment, unit)
        text = read_text(path)
        if text is not None:
            try:
                command = parse_unit(text, str(path))
                with self.seams.http(5.0) as client:
                    wait_until_idle(client, command.base_url, api_key=command.api_key,
                                    timeout_s=deployment.routing.drain_timeout_s)
            except (SpecdError, httpx.HTTPError):
                pass  # nothing to wait for: it does not answer
            self._passed("route-drain", unit)
        try:
            if systemd.unit_state(unit).running:
                systemd.stop(unit)
            if systemd.is_enabled(unit):
                systemd.set_enabled(unit, False)
        except SpecdError:
            pass  # not loaded: nothing runs
        self._passed("route-stop", unit)
        if path.exists():
            path.unlink()
            systemd.reload()
        self._passed("route-remove", unit)
