"""The blue-green switch: the new server starts in the free slot beside the old one, passes the
full health gate there, then the proxy flips to it; the old one finishes its streams and stops.

Its plan (specd.deploy.plans): backup -> write (the free slot's unit) -> reload -> start (the
free slot, at a lowered CPU priority) -> gate (the new server, on its own port) -> flip (the slot
pointer, then the daemon's proxy) -> drain (the old server's requests finish) -> stop-old ->
enable (boot start moves with the service). The last four steps are this module's.

Reverted backwards (specd.deploy.transaction), the old slot serves again without a gap: the old
server is started and gated first if it was stopped (`revert-start-old`, `revert-gate-old`), the
pointer and the proxy go back to it (`revert-flip`), and only then is the new server stopped
(`revert-stop-new`) and the free slot's file put back as it was (`revert-write`, `revert-reload`).

`choose` decides `--strategy auto`: blue-green only when clients come through the daemon's proxy,
a server runs now, the new one fits beside it (`specd.deploy.capacity`) and its port is free;
otherwise a restart, and the note says why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from specd.deploy.capacity import Capacity
from specd.deploy.load import wait_until_idle
from specd.deploy.plan import Target, target_from_text
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
from specd.deploy.steps import restart_from_file
from specd.deploy.transaction import Run, Step
from specd.deploy.unitfiles import read_text, sha256_text
from specd.endpoint import socket_of
from specd.errors import PreflightError, SpecdError, UsageError
from specd.unit.parse import parse_unit

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
    socket = socket_of(target.base_url) or (socket_of(parse_unit(current).base_url) if current else None)
    if socket is not None:
        return _refuse_or_restart(request, f"the server listens on the Unix socket {socket}, where clients connect; "
                                           "a second server beside it needs a port of its own (and the [proxy] to "
                                           "send clients there), which a socket has not", restart)
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


# ---- the steps after the gate -------------------------------------------------------------------


def _flip(run: Run) -> str:
    seams = run.seams
    run.notes.append(_priority_note(seams, run.lowered))  # back to full priority before it gets a request
    write_pointer(seams.state, seams.deployment, run.new.name)
    run.notes.append(_flip_note(run.new, seams.proxy.retarget(seams.deployment.unit)))
    return run.notes[-1]


def _undo_flip(run: Run) -> bool:
    seams = run.seams
    write_pointer(seams.state, seams.deployment, run.old.name)
    seams.proxy.retarget(seams.deployment.unit)
    run.passed("revert-flip", f"the proxy sends to the {run.old.name} slot again")
    return True


def _drain(run: Run) -> str:
    run.notes.append(_drain_old(run.seams, run.current, run.old))
    return run.notes[-1]


def _save_old_server(run: Run) -> dict[str, Any]:
    state = run.seams.systemd.unit_state(run.old.unit) if run.current is not None else None
    return {"main_pid": state.main_pid if state is not None and state.running else 0,
            "sha256": sha256_text(run.current) if run.current is not None else None}


def _stop_old(run: Run) -> str:
    run.seams.systemd.stop(run.old.unit)  # the proxy sends it nothing since the flip: nothing to drain
    return f"{run.old.unit} stopped"


def _old_kept(run: Run) -> bool:
    main_pid = run.intent.value("stop-old", "main_pid")
    now = run.seams.systemd.unit_state(run.old.unit)
    return bool(main_pid) and now.running and now.main_pid == main_pid


def _bring_back_old(run: Run) -> None:
    text = read_text(run.old.unit_path)
    if text is None or sha256_text(text) != run.intent.value("stop-old", "sha256"):
        raise SpecdError(f"cannot bring back {run.old.unit}: its unit file is not the one that served")
    restart_from_file(run, run.old, points=("revert-start-old", "revert-gate-old"))


def _undo_stop_old(run: Run) -> bool:
    if _old_kept(run):
        return False  # it was never stopped
    _bring_back_old(run)
    return True


def _save_enabled(run: Run) -> dict[str, Any]:
    return {"enabled": run.current is not None and run.seams.systemd.is_enabled(run.old.unit)}


def _enable(run: Run) -> str:
    if not run.intent.value("enable", "enabled"):
        return f"{run.old.unit} was not enabled at boot: nothing to move"
    run.seams.systemd.set_enabled(run.new.unit, True)
    run.seams.systemd.set_enabled(run.old.unit, False)
    run.notes.append(f"{run.new.unit} is now the one enabled at boot (was {run.old.unit})")
    return run.notes[-1]


def _undo_enable(run: Run) -> bool:
    if not run.intent.value("enable", "enabled"):
        return False
    run.seams.systemd.set_enabled(run.old.unit, True)
    run.seams.systemd.set_enabled(run.new.unit, False)
    return True


AFTER_GATE = (
    Step("flip", ("slot pointer", "proxy"), _flip, undo=_undo_flip, undo_points=("revert-flip",)),
    Step("drain", ("nothing",), _drain),
    Step("stop-old", ("server",), _stop_old, undo=_undo_stop_old, save=_save_old_server,
         undo_points=("revert-start-old", "revert-gate-old")),
    Step("enable", ("boot enablement",), _enable, undo=_undo_enable, save=_save_enabled),
)


def settled(run: Run) -> str:
    """After the undos: the old server serves (brought back if it died on its own meanwhile)."""
    old, new, profile = run.old, run.new, run.intent.old_profile or "the previous unit"
    if not run.acted:
        return f"nothing was changed: {old.unit} kept serving"
    if not run.restarted and not _old_kept(run) and run.intent.value("stop-old", "main_pid"):
        _bring_back_old(run)
    if run.restarted:
        return f"{profile} serves again in the {old.name} slot ({old.unit}), healthy; {new.unit} was stopped"
    pid = run.seams.systemd.unit_state(old.unit).main_pid
    return (f"{profile} kept serving in the {old.name} slot ({old.unit}, PID {pid}); "
            f"the new server in {new.unit} was stopped")


# ---- what the steps say --------------------------------------------------------------------------


def _priority_note(seams: Seams, lowered: Lowered | str | None) -> str:
    if lowered is None:
        return "the new server had no process to lower the priority of while it loaded"
    if isinstance(lowered, str):
        return f"the new server loaded beside the live one at its own priority: {lowered}"
    failed = seams.priority.restore(lowered)
    if failed is not None:
        return f"the new server loaded at nice {lowered.loading_nice}; {failed}"
    return (f"the new server loaded and was gated at nice {lowered.loading_nice} (the live server kept "
            f"its CPU), then went back to nice {lowered.nice}")


def _flip_note(new: Slot, told: bool | None) -> str:
    if told is None:
        return (f"the {new.name} slot serves now; the specd daemon is not running, so its proxy will send "
                "there when it starts")
    if told is False:
        return (f"the {new.name} slot serves now; the proxy did not confirm in time "
                "(it follows within its next check)")
    return (f"the proxy sends new requests to the {new.name} slot ({new.unit}); "
            "streams in flight finish where they are")


def _drain_old(seams: Seams, current: str | None, old: Slot) -> str:
    if current is None:
        return "no old server to drain"
    old_target = target_from_text(current, None, where=str(old.unit_path))
    with seams.http(5.0) as client:
        drained = wait_until_idle(client, old_target.base_url, api_key=old_target.api_key,
                                  timeout_s=OLD_STREAMS_TIMEOUT_S, clock=seams.clock.monotonic,
                                  sleep=seams.clock.sleep)
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
