"""The steps every plan shares, and the restart strategy's own, each with its undo (the plans
that order them: specd.deploy.plans; blue-green's own steps: specd.deploy.bluegreen).

A step's undo puts back what the step changed and checks before it acts (specd.deploy.transaction
says why). What each touches: `backup` a `.pre-*` file beside the unit (kept on revert: a copy is
harmless and pruned later); `write` the unit file of the slot being installed, and its key files;
`reload` systemd's view of the unit files; `restart` the serving server, inside the drain of the
daemon's proxy (`Seams.proxy.drained`: new requests wait at the gate, those in flight finish);
`start` a server in the free slot, which serves nobody, so nothing drains; `gate` nothing (a
check).

Only the restart step's undo reaches past its own step: a server comes back only from the unit it
ran, so it puts the unit file back first (the write step's undo, which then finds nothing to do).
The revert fault points keep the names crash tests use (`SPECD_FAULT=revert-write`...).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specd.deploy.plan import target_from_text
from specd.deploy.slots import Slot
from specd.deploy.transaction import Run, Step
from specd.deploy.unitfiles import atomic_write, read_text, sha256_text, write_backup
from specd.errors import SpecdError, SwitchFailed

# ---- backup, write, reload, gate: every plan's ---------------------------------------------------


def _backup(run: Run) -> str:
    backup = Path(run.intent.backup_path) if run.intent.backup_path else None
    if run.current is None or backup is None:
        return "no unit before"
    run.seams.units.put(run.current)
    write_backup(run.old.unit_path, run.current, run.intent.old_profile, target=backup)
    return f"old unit kept as {backup.name}"


def _save_slot_file(run: Run) -> dict[str, Any]:
    """What the slot's unit file holds before the write: its text (into the unit store). Its mode needs
    no saving: every write of the file keeps the mode it has (specd.durable.atomic_write)."""
    path = run.new.unit_path
    text = read_text(path)
    return {"path": str(path), "before": run.seams.units.put(text) if text is not None else None}


def _write(run: Run) -> str:
    target = run.installing
    for secret, content in target.secrets:
        atomic_write(secret, content.encode("utf-8"), mode=0o600)
    atomic_write(run.new.unit_path, target.text.encode("utf-8"), fault_name="unit")
    return f"new unit written to {run.new.unit_path}"


def previous_text(run: Run, digest: str, installed: str | None) -> str:
    """The slot file's text before the write: from the unit store, else the backup, else the file itself
    when it is still that text; SwitchFailed when no copy of it is left anywhere."""
    candidates = (run.seams.units.get(digest),
                  read_text(Path(run.intent.backup_path)) if run.intent.backup_path else None, installed)
    for text in candidates:
        if text is not None and sha256_text(text) == digest:
            return text
    raise SwitchFailed(f"cannot revert {run.new.unit}: the previous unit text is lost "
                       f"(no backup at {run.intent.backup_path}); the unit now holds the new profile")


def _put_back_slot_file(run: Run) -> bool:
    """The slot's unit file as it was before the write (removed when there was none); True if changed."""
    path, before = Path(run.intent.value("write", "path")), run.intent.value("write", "before")
    installed = read_text(path)
    if (installed is None and before is None) or (installed is not None and sha256_text(installed) == before):
        return False
    if before is None:
        path.unlink(missing_ok=True)
    else:
        text = previous_text(run, before, installed)
        atomic_write(path, text.encode("utf-8"), fault_name="revert-unit")
    return True


def _undo_write(run: Run) -> bool:
    if "write" in run.undone:
        return False  # the restart step's undo did it already
    run.undone.add("write")
    if not _put_back_slot_file(run) and "write" not in run.intent.done:
        return False  # it had not begun
    run.passed("revert-write", "the previous unit is back in place")
    run.seams.systemd.reload()  # once per revert: `run.undone` keeps this undo from running twice
    run.passed("revert-reload", "")
    return True


def _reload(run: Run) -> str:
    run.started = run.seams.clock.monotonic()
    run.seams.systemd.reset_failed(run.new.unit)
    run.seams.systemd.reload()
    return "systemd reloaded its units"


def _gate(run: Run) -> str:
    target, systemd, unit = run.installing, run.seams.systemd, run.new.unit
    run.health = run.gate(target.base_url, target.alias, timeout_s=target.timeout_s, stability_s=target.stability_s,
                          unit_state=lambda: systemd.unit_state(unit), api_key=target.api_key)
    return f"healthy after {run.health.total_s:.1f} s"


BACKUP = Step("backup", ("backup file",), _backup)
WRITE = Step("write", ("unit file",), _write, undo=_undo_write, save=_save_slot_file,
             undo_points=("revert-write", "revert-reload"))
RELOAD = Step("reload", ("service manager",), _reload)
GATE = Step("gate", ("nothing",), _gate)

# ---- restart: the serving server, in place -------------------------------------------------------


def _save_server(run: Run) -> dict[str, Any]:
    state = run.seams.systemd.unit_state(run.new.unit) if run.current is not None else None
    return {"main_pid": state.main_pid if state is not None and state.running else 0,
            "active": bool(state and state.active_state == "active")}


def _restart(run: Run) -> str:
    unit = run.new.unit
    with run.seams.proxy.drained(unit):
        run.seams.systemd.restart(unit)
    run.restart_s = run.seams.clock.monotonic() - run.started
    return f"{run.seams.unit} restarted in {run.restart_s:.1f} s"


def restart_from_file(run: Run, server: Slot, *, stability_s: float = 2.0, points: tuple[str, str]) -> None:
    """Restart `server` from the unit file in place (drained) and gate it; passes `points` after each."""
    text = read_text(server.unit_path)
    if text is None:  # pragma: no cover - the callers put the file back first
        raise SpecdError(f"cannot bring back {server.unit}: its unit file is gone")
    systemd = run.seams.systemd
    systemd.reset_failed(server.unit)
    with run.seams.proxy.drained(server.unit):
        systemd.restart(server.unit)
    run.restarted = True
    run.passed(points[0], "")
    old = target_from_text(text, run.intent.old_profile, where=str(server.unit_path))
    run.gate(old.base_url, old.alias, timeout_s=old.timeout_s, stability_s=min(old.stability_s, stability_s),
             unit_state=lambda: systemd.unit_state(server.unit), api_key=old.api_key)
    run.passed(points[1], f"{run.intent.old_profile or 'the previous unit'} is healthy again")


def _undo_restart(run: Run) -> bool:
    unit, systemd = run.new.unit, run.seams.systemd
    main_pid = run.intent.value("restart", "main_pid")
    now = systemd.unit_state(unit)
    if main_pid and now.running and now.main_pid == main_pid:
        return False  # interrupted before the restart began (in its drain): the old server kept running
    _undo_write(run)  # the old server comes back only from its own unit
    if run.intent.value("write", "before") is None or not run.intent.value("restart", "active"):
        with run.seams.proxy.drained(unit):
            systemd.stop(unit)  # there was no unit, or its server was stopped: as it was
        return True
    restart_from_file(run, run.new, points=("revert-restart", "revert-gate"))
    return True


def restart_settled(run: Run) -> str:
    unit, previous = run.new.unit, run.intent.old_profile or "the previous unit"
    if not run.acted:
        return f"nothing was changed: {unit} still runs as before"
    if run.intent.value("write", "before") is None:
        return f"the new unit {unit} was removed again (there was none before)"
    if not run.intent.value("restart", "active"):
        return f"{unit} is back on {run.intent.old_profile or 'its previous unit'} (stopped, as it was)"
    if not run.restarted:
        now = run.seams.systemd.unit_state(unit)
        if now.running:
            return f"reverted to {previous} before its server was restarted: it kept running (PID {now.main_pid})"
        restart_from_file(run, run.new, points=("revert-restart", "revert-gate"))  # it died meanwhile
    return f"reverted to {previous}, which is healthy again"


RESTART = Step("restart", ("server", "proxy"), _restart, undo=_undo_restart, save=_save_server,
               undo_points=("revert-write", "revert-reload", "revert-restart", "revert-gate"))

# ---- start: a server in the free slot, which serves nobody ---------------------------------------


def _start(run: Run, *, lower: bool) -> str:
    state = run.seams.systemd.restart(run.new.unit)
    run.restart_s = run.seams.clock.monotonic() - run.started
    if lower:  # loading beside the live server: leave it the CPU (given back before the flip)
        run.lowered = run.seams.priority.lower(state.main_pid) if state.main_pid > 0 else None
    return f"{run.new.unit} started in {run.restart_s:.1f} s"


def _undo_start(run: Run) -> bool:
    run.seams.systemd.stop(run.new.unit)
    run.passed("revert-stop-new", f"the new server in {run.new.unit} was stopped")
    return True


START_LOWERED = Step("start", ("server",), lambda run: _start(run, lower=True), undo=_undo_start,
                     undo_points=("revert-stop-new",))
START = Step("start", ("server",), lambda run: _start(run, lower=False), undo=_undo_start,
             undo_points=("revert-stop-new",))


def shadow_settled(run: Run) -> str:
    return f"the candidate in {run.new.unit} was stopped and its unit file put back"
