"""The blue-green switch: the new server starts in the free slot beside the old one, passes the
full health gate there, then the proxy flips to it; the old one finishes its streams and stops.

Steps after the intent, each a named fault point (`SPECD_FAULT=<step>`), recorded in the intent:
backup -> write (the free slot's unit) -> reload -> start (the free slot) -> gate (the new
server, on its own port) -> flip (the slot pointer, then the daemon's proxy) -> drain (the old
server's requests finish) -> stop-old -> enable (boot start moves with the service) -> commit.

Revert (any exception after the intent, or recovery after a kill) makes the old slot serve
again without a gap: the old server is started and gated first if it is no longer running, the
pointer and the proxy go back to it, and only then is the new server stopped and the free
slot's file put back as it was. Each part checks before it acts, so a revert killed half-way is
finished by the next one (`revert-start-old`, `revert-gate-old`, `revert-flip`,
`revert-stop-new`, `revert-slot-file` are its fault points).

`choose` decides `--strategy auto`: blue-green only when clients come through the daemon's proxy,
a server runs now, the new one fits beside it (`specd.deploy.capacity`) and its port is free;
otherwise a restart, and the note says why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from specd.deploy import intent as intents
from specd.deploy.capacity import Capacity
from specd.deploy.health import HealthResult
from specd.deploy.load import wait_until_idle
from specd.deploy.plan import FaultHook, HealthGate, Target, target_from_text
from specd.deploy.preflight import port_holders
from specd.deploy.priority import Lowered
from specd.deploy.seams import Seams
from specd.deploy.slots import (
    Slot,
    Strategy,
    StrategyRequest,
    port_beside,
    port_of,
    slot,
    with_port,
    write_pointer,
)
from specd.deploy.unitfiles import atomic_write, read_text, sha256_text
from specd.errors import PreflightError, SpecdError, UsageError

BLUE_GREEN_STEPS = ("preflight", "intent", "backup", "write", "reload", "start", "gate", "flip", "drain",
                    "stop-old", "enable", "commit")
BLUE_GREEN_REVERT_STEPS = ("revert-start-old", "revert-gate-old", "revert-flip", "revert-stop-new",
                           "revert-slot-file")
FREE_SLOT_UNTOUCHED_STEPS = ("intent", "backup")
OLD_STREAMS_TIMEOUT_S = 300.0  # the old server's streams get this long to finish after the flip
STRATEGY_NOTE = "strategy: "


@dataclass(frozen=True)
class SlotPlan:
    """How a switch replaces the server: the strategy, the slot that serves now and the one the new
    unit goes into (the same slot for a restart), and the target as it will be installed there."""

    strategy: Strategy
    old: Slot
    new: Slot
    target: Target
    note: str  # why this strategy, for the switch's notes and its history row


def _refuse_or_restart(request: StrategyRequest, why: str, restart: SlotPlan) -> SlotPlan:
    if request == "blue-green":
        raise PreflightError(f"--strategy blue-green: {why}; nothing was changed",
                             hint="--strategy restart replaces the server in place (clients wait for the load)")
    return replace(restart, note=f"{STRATEGY_NOTE}restart, because {why}")


def choose(request: StrategyRequest, seams: Seams, target: Target, current: str | None, running: bool,
           capacity: Callable[[], Capacity], ports_in_use: Callable[[int], set[int]] = port_holders) -> SlotPlan:
    """The plan for `request` (auto, blue-green, restart); a forced blue-green that cannot be done is
    refused (PreflightError: nothing was changed), auto falls back to a restart and says why."""
    serving = seams.serving()
    restart = SlotPlan("restart", serving, serving, target, f"{STRATEGY_NOTE}restart")
    if request == "restart":
        return restart
    deployment = seams.deployment
    if deployment.proxy is None:
        return _refuse_or_restart(request, "the deployment has no [proxy]: clients talk to the server's own port, "
                                           "which a second server cannot take over", restart)
    if current is None or not running:
        return replace(restart, note=f"{STRATEGY_NOTE}restart, because no server runs now (nothing to keep serving)")
    if request == "auto" and not seams.proxy.serving(deployment.unit):
        return _refuse_or_restart(request, "the specd daemon's proxy is not running (clients would not follow "
                                           "the new server)", restart)
    where = str(serving.unit_path)
    try:
        serving_port = port_of(current, where)
        port = port_beside(deployment, target.text, serving_port, where=target.profile or "the new unit")
        text = target.text if port == port_of(target.text) else with_port(target.text, port, where)
    except UsageError as exc:
        return _refuse_or_restart(request, f"the new server's port cannot be chosen ({exc.message})", restart)
    holders = ports_in_use(port)
    if holders:
        return _refuse_or_restart(request, f"port {port} for the new server is in use (pid "
                                           f"{', '.join(str(p) for p in sorted(holders))}); set [proxy] spare_port",
                                  restart)
    fit = capacity()
    if not fit.fits:
        return _refuse_or_restart(request, f"the new server does not fit beside the old one: {fit.reason}", restart)
    free = slot(deployment, "green" if serving.name == "blue" else "blue")
    moved = replace(target, text=text, base_url=target.base_url.rsplit(":", 1)[0] + f":{port}")
    return SlotPlan("blue-green", serving, free, moved,
                    f"{STRATEGY_NOTE}blue-green into the {free.name} slot ({free.unit}, port {port}); {fit.reason}")


def stop_stray_free_slot(seams: Seams) -> str | None:
    """Outside a switch the free slot is stopped; a server found there (a shadow bench's, or one a
    killed bench left) is stopped before a mutating command acts. Returns what was done, if anything."""
    serving = seams.serving()
    free = slot(seams.deployment, "green" if serving.name == "blue" else "blue")
    if not free.unit_path.exists() or not seams.systemd.unit_state(free.unit).running:
        return None
    seams.systemd.stop(free.unit)
    return f"stopped a server in the free {free.name} slot ({free.unit}: a shadow bench's, or a leftover)"


class BlueGreen:
    """Runs and reverts the blue-green steps for a Switcher (which owns the intent and the history)."""

    def __init__(self, seams: Seams, *, gate: HealthGate, fault: FaultHook,
                 reached: Callable[[intents.Intent, str], None]) -> None:
        self.seams = seams
        self._gate = gate
        self._fault = fault
        self._reached = reached

    def _slots(self, intent: intents.Intent) -> tuple[Slot, Slot]:
        return slot(self.seams.deployment, intent.old_slot), slot(self.seams.deployment, intent.slot)

    def apply(self, intent: intents.Intent, target: Target, current: str | None,
              backup_write: Callable[[], None]) -> tuple[float, HealthResult, tuple[str, ...]]:
        """The steps after the intent; raises on any failure (the Switcher then reverts)."""
        old, new = self._slots(intent)
        systemd, clock = self.seams.systemd, self.seams.clock
        backup_write()
        self._reached(intent, "backup")
        for secret, content in target.secrets:
            atomic_write(secret, content.encode("utf-8"), mode=0o600)
        atomic_write(new.unit_path, target.text.encode("utf-8"), fault_name="unit")
        self._reached(intent, "write")
        started = clock.monotonic()
        systemd.reset_failed(new.unit)
        systemd.reload()
        self._reached(intent, "reload")
        started_state = systemd.restart(new.unit)
        start_s = clock.monotonic() - started
        lowered = self.seams.priority.lower(started_state.main_pid) if started_state.main_pid > 0 else None
        self._reached(intent, "start")
        health = self._gate(target.base_url, target.alias, timeout_s=target.timeout_s, stability_s=target.stability_s,
                            unit_state=lambda: systemd.unit_state(new.unit), api_key=target.api_key)
        self._reached(intent, "gate")
        notes = [self._priority_note(lowered)]  # back to full priority before it gets a request
        write_pointer(self.seams.state, self.seams.deployment, new.name)
        notes.append(self._flip_note(new, self.seams.proxy.retarget(self.seams.deployment.unit)))
        self._reached(intent, "flip")
        notes.append(self._drain_old(current, old))
        self._reached(intent, "drain")
        systemd.stop(old.unit)
        self._reached(intent, "stop-old")
        if intent.old_enabled:
            systemd.set_enabled(new.unit, True)
            systemd.set_enabled(old.unit, False)
            notes.append(f"{new.unit} is now the one enabled at boot (was {old.unit})")
        self._reached(intent, "enable")
        return start_s, health, tuple(notes)

    def _priority_note(self, lowered: Lowered | str | None) -> str:
        if lowered is None:
            return "the new server had no process to lower the priority of while it loaded"
        if isinstance(lowered, str):
            return f"the new server loaded beside the live one at its own priority: {lowered}"
        failed = self.seams.priority.restore(lowered)
        if failed is not None:
            return f"the new server loaded at nice {lowered.loading_nice}; {failed}"
        return (f"the new server loaded and was gated at nice {lowered.loading_nice} (the live server kept "
                f"its CPU), then went back to nice {lowered.nice}")

    def _flip_note(self, new: Slot, told: bool | None) -> str:
        if told is None:
            return (f"the {new.name} slot serves now; the specd daemon is not running, so its proxy will send "
                    "there when it starts")
        if told is False:
            return (f"the {new.name} slot serves now; the proxy did not confirm in time "
                    "(it follows within its next check)")
        return (f"the proxy sends new requests to the {new.name} slot ({new.unit}); "
                "streams in flight finish where they are")

    def _drain_old(self, current: str | None, old: Slot) -> str:
        if current is None:
            return "no old server to drain"
        old_target = target_from_text(current, None, where=str(old.unit_path))
        with self.seams.http(5.0) as client:
            drained = wait_until_idle(client, old_target.base_url, api_key=old_target.api_key,
                                      timeout_s=OLD_STREAMS_TIMEOUT_S, clock=self.seams.clock.monotonic,
                                      sleep=self.seams.clock.sleep)
        if drained.idle is None:
            return (f"the old server in {old.unit} cannot report its requests (/slots and /metrics are off): "
                    "it was stopped without waiting for its streams")
        if drained.idle is False:
            return (f"the old server still had requests after {drained.waited_s:.0f} s: stopped anyway "
                    "(their clients see the stream end)")
        if drained.busy_at_start:
            return (f"the old server finished its {drained.busy_at_start} request(s) in flight in "
                    f"{drained.waited_s:.1f} s")
        return "the old server had no request in flight"

    # -- revert ------------------------------------------------------------------------------

    def restore(self, intent: intents.Intent) -> str:
        """Make the old slot serve again; stop the new server and put the free slot's file back.
        Returns the sentence on the state reached; idempotent, so recovery can run it again."""
        old, new = self._slots(intent)
        systemd = self.seams.systemd
        if intent.step in FREE_SLOT_UNTOUCHED_STEPS and self._slot_file_as_before(intent, new):
            return f"nothing was changed: {old.unit} kept serving"
        now = systemd.unit_state(old.unit)
        kept = bool(intent.old_main_pid) and now.running and now.main_pid == intent.old_main_pid
        if not kept:
            self._restart_old(intent, old)
        write_pointer(self.seams.state, self.seams.deployment, old.name)
        self.seams.proxy.retarget(self.seams.deployment.unit)
        self._fault("revert-flip")
        if intent.old_enabled:
            systemd.set_enabled(old.unit, True)
            systemd.set_enabled(new.unit, False)
        systemd.stop(new.unit)
        self._fault("revert-stop-new")
        self._put_back_slot_file(intent, new)
        systemd.reload()
        self._fault("revert-slot-file")
        profile = intent.old_profile or "the previous unit"
        if kept:
            return (f"{profile} kept serving in the {old.name} slot ({old.unit}, PID {now.main_pid}); "
                    f"the new server in {new.unit} was stopped")
        return f"{profile} serves again in the {old.name} slot ({old.unit}), healthy; {new.unit} was stopped"

    def _restart_old(self, intent: intents.Intent, old: Slot) -> None:
        text = read_text(old.unit_path)
        if text is None or sha256_text(text) != intent.old_sha256:
            raise SpecdError(f"cannot bring back {old.unit}: its unit file is not the one that served")
        systemd = self.seams.systemd
        systemd.reset_failed(old.unit)
        systemd.restart(old.unit)
        self._fault("revert-start-old")
        target = target_from_text(text, intent.old_profile, where=str(old.unit_path))
        self._gate(target.base_url, target.alias, timeout_s=target.timeout_s, stability_s=min(target.stability_s, 2.0),
                   unit_state=lambda: systemd.unit_state(old.unit), api_key=target.api_key)
        self._fault("revert-gate-old")

    def _slot_file_as_before(self, intent: intents.Intent, new: Slot) -> bool:
        text = read_text(new.unit_path)
        return (sha256_text(text) if text is not None else None) == intent.slot_old_sha256

    def _put_back_slot_file(self, intent: intents.Intent, new: Slot) -> None:
        if self._slot_file_as_before(intent, new):
            return
        before = self.seams.units.get(intent.slot_old_sha256) if intent.slot_old_sha256 else None
        if before is None:
            new.unit_path.unlink(missing_ok=True)
        else:
            atomic_write(new.unit_path, before.encode("utf-8"), fault_name="revert-unit")
