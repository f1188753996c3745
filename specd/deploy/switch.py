"""The switch transaction and its inverse, rollback.

Steps, each a named checkpoint (`SPECD_FAULT=<step>` kills the process there, for crash tests):
preflight -> intent -> backup -> write -> reload -> restart -> gate -> commit. The intent record
is rewritten with the step reached after each one. Any exception after `intent` (a health or
systemd failure, a disk error, a bug, Ctrl-C) reverts: when the unit file was not yet replaced
nothing is restarted; otherwise the previous unit is put back, restarted and health-gated, and
SwitchFailed says why. A kill anywhere is undone by the next *mutating* specd command or the
daemon (`recover`); read-only commands only report a pending intent.

The seams (`Seams`: state paths, history, systemd client, clock; plus the health gate, journal
reader, fault hook, preflight and step hook) are passed in; `specd.context` builds the real ones,
tests pass fakes. The step hook (`on_step(step, detail)`) hears each step as it passes, so the
status page can show a switch live; it must not raise.
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager
from pathlib import Path

from specd.deploy import intent as intents
from specd.deploy.health import HealthResult, wait_healthy
from specd.deploy.history import Generation, History, Trigger
from specd.deploy.plan import (
    NOT_RESTARTED_STEPS,
    REVERT_STEPS,
    STEPS,
    UNIT_UNTOUCHED_STEPS,
    WRITE_STEPS,
    FaultHook,
    HealthGate,
    JournalReader,
    Outcome,
    PreflightRunner,
    StepHook,
    Target,
    target_from_text,
)
from specd.deploy.preflight import Preflight, run_preflight
from specd.deploy.seams import Seams
from specd.deploy.systemd import SystemdClient, UnitState, journal_tail
from specd.deploy.unitfiles import (
    atomic_write,
    backup_name,
    disk_free,
    list_backups,
    prune_backups,
    read_text,
    remove_stale_temp_files,
    sha256_text,
    write_backup,
)
from specd.durable import checkpoint
from specd.errors import (
    LockBusy,
    ProfileError,
    SpecdError,
    SwitchFailed,
    UsageError,
)
from specd.profiles.config import Deployment
from specd.profiles.load import load_profile
from specd.unit.render import profile_of_unit

log = logging.getLogger("specd.deploy.switch")
JOURNAL_EVENT = "revert-journal"  # the unit's journal when a switch was reverted: "generation N\n<lines>"
__all__ = ["REVERT_STEPS", "STEPS", "WRITE_STEPS", "Outcome", "Switcher", "Target", "target_from_text"]


class Switcher:
    """Switch, rollback and recovery for one deployment over the seams it is given.

    `specd.context.switcher_for` passes real seams whose systemd client drains the daemon's proxy
    around restarts; tests pass a `Seams` over a tmp dir and fakes.
    """

    def __init__(self, seams: Seams, *, trigger: Trigger = "cli", gate: HealthGate = wait_healthy,
                 journal: JournalReader = journal_tail, fault: FaultHook = checkpoint,
                 preflight: PreflightRunner = run_preflight, on_step: StepHook | None = None) -> None:
        self.seams = seams
        self.deployment: Deployment = seams.deployment
        self.trigger = trigger
        self.history: History = seams.history
        self.store = seams.units
        self._intent_path = seams.state.intent(seams.unit)
        self._clock = seams.clock
        self._gate = gate
        self._journal = journal
        self._fault = fault
        self._preflight = preflight
        self._on_step = on_step

    @property
    def systemd(self) -> SystemdClient:
        return self.seams.systemd

    def pending_intent(self) -> intents.Intent | None:
        """An interrupted switch or rollback that awaits recovery (read-only)."""
        return intents.load(self._intent_path)

    @property
    def unit(self) -> str:
        return self.deployment.unit

    def lock(self, what: str, timeout_s: float | None = None) -> AbstractContextManager[None]:
        return self.seams.lock(what, timeout_s)

    def installed_text(self) -> str | None:
        return read_text(self.deployment.unit_path)

    def active_profile(self) -> str | None:
        text = self.installed_text()
        return profile_of_unit(text) if text else None

    # -- public operations -------------------------------------------------------------------

    def switch(self, name: str) -> Outcome:
        with self.lock(f"switch {name}"):
            self._recover_locked()
            self._record_edit_locked()
            started = self._clock.monotonic()
            current = self.installed_text()
            main_pid = self._state_or_none().main_pid if current is not None else 0
            pre: Preflight = self._preflight(self.deployment, name, current_main_pid=main_pid)
            self._passed("preflight", f"profile {name} is valid and fits this box")
            state = self._state_or_none() if current is not None else None
            if current == pre.unit_text and state is not None and state.running:
                active = self.history.active(self.unit)
                if active is not None:
                    return Outcome(active, None, tuple(pre.notes) + (f"already on profile {name}",), unchanged=True)
            target = Target(pre.unit_text, name, pre.profile.alias, pre.profile.base_url,
                            pre.profile.health_timeout_s, pre.profile.stability_s,
                            pre.profile.api_key, pre.secrets)
            return self._install(target, kind="switch", restores_id=None, preflight_s=pre.seconds,
                                 started=started, notes=tuple(pre.notes))

    def rollback(self, to: int | None = None) -> Outcome:
        with self.lock("rollback" if to is None else f"rollback --to {to}"):
            self._recover_locked()
            if self.history.active(self.unit) is not None:
                self._record_edit_locked()  # without history, rollback works from the .pre-* files
            started = self._clock.monotonic()
            target_gen, text = self._rollback_target(to)
            profile = target_gen.profile if target_gen else profile_of_unit(text)
            where = f"generation {target_gen.id}" if target_gen else "newest .pre-* backup"
            target = target_from_text(text, profile, where=where)
            if profile is not None:
                try:
                    known = load_profile(self.deployment.profiles_dir, profile)
                    target = Target(text, profile, target.alias, target.base_url, known.health_timeout_s,
                                    known.stability_s)
                except ProfileError:
                    pass  # the profile file changed or is gone: gate with the defaults
            return self._install(target, kind="rollback", restores_id=target_gen.content_id if target_gen else None,
                                 preflight_s=0.0, started=started, notes=())

    def recover(self, *, wait: bool = True) -> str | None:
        """Undo an interrupted operation, if any. With wait=False, skip when the lock is busy."""
        if not wait and intents.load(self._intent_path) is None:
            return None
        try:
            with self.lock("recover", None if wait else 0.0):
                return self._recover_locked()
        except LockBusy:
            if wait:
                raise
            return None

    def record_external_edit(self) -> Generation | None:
        """Record a hand edit of the unit as a generation (backing up what it replaced), so
        rollback still works after it. None when the file is what specd last installed."""
        with self.lock("record a hand edit of the unit", 0.0):
            return self._record_edit_locked()

    def _record_edit_locked(self) -> Generation | None:
        if intents.load(self._intent_path) is not None:
            return None  # a half-done switch, not a hand edit: recovery owns that state
        text = self.installed_text()
        active = self.history.active(self.unit)
        expected = active.unit_sha256 if active else None
        if text is None or sha256_text(text) == expected:
            return None
        replaced = self.store.get(expected) if expected else None
        backup = None
        if active is not None and replaced is not None:
            backup = write_backup(self.deployment.unit_path, replaced, active.profile)
        generation_id = self.history.add(
            self.unit, kind="external-edit", profile=profile_of_unit(text), unit_sha256=self.store.put(text),
            backup_path=backup, previous_id=active.id if active else None, trigger=self.trigger, outcome="ok",
            detail="the unit file was edited outside specd",
        )
        return self.history.get(generation_id)

    # -- the transaction ---------------------------------------------------------------------

    def _state_or_none(self) -> UnitState:
        return self.systemd.unit_state(self.unit)

    def _install(self, target: Target, *, kind: intents.OperationKind, restores_id: int | None, preflight_s: float, started: float,
                 notes: tuple[str, ...]) -> Outcome:
        unit_path = self.deployment.unit_path
        current = self.installed_text()
        old_state = self.systemd.unit_state(self.unit) if current is not None else None
        previous = self.history.active(self.unit)
        old_profile = profile_of_unit(current) if current else None
        backup = backup_name(unit_path, old_profile) if current is not None else None
        if current is not None and disk_free(unit_path.parent) < 2 * len(current.encode()) + 8192:
            raise SwitchFailed(f"{unit_path.parent}: not enough free disk space for a backup; nothing was changed")
        new_sha = self.store.put(target.text)
        generation_id = self.history.add(
            self.unit, kind=kind, profile=target.profile, unit_sha256=new_sha, backup_path=backup,
            previous_id=previous.id if previous else None, trigger=self.trigger, restores_id=restores_id,
        )
        intent = intents.Intent(
            unit=self.unit, unit_path=str(unit_path), generation_id=generation_id, profile=target.profile, kind=kind,
            old_existed=current is not None, old_active=bool(old_state and old_state.active_state == "active"),
            old_sha256=sha256_text(current) if current is not None else None, old_profile=old_profile,
            backup_path=str(backup) if backup else None, new_sha256=new_sha,
            old_main_pid=old_state.main_pid if old_state is not None and old_state.running else 0,
        )
        intents.save(intent, self._intent_path)
        try:
            # inside the try: Ctrl-C right after the intent reverts ("nothing was changed")
            self._passed("intent", f"generation {generation_id}: {kind} to {target.profile or 'the previous unit'}")
            restart_s, health = self._apply(intent, target, current, backup)
        except (Exception, KeyboardInterrupt) as failure:  # bugs and Ctrl-C revert too; a kill is recovered later
            self._revert(intent, reason=_reason(failure))
            raise AssertionError("unreachable: _revert raises") from failure  # pragma: no cover
        # What the switch itself found worth keeping; "no GPU: VRAM check skipped" on every row is not.
        kept = [note for note in notes if "VRAM check skipped" not in note]
        self.history.finish(generation_id, outcome="ok", detail=" ".join(kept), preflight_s=preflight_s,
                            restart_s=restart_s, health_s=health.total_s, total_s=self._clock.monotonic() - started)
        intents.clear(self._intent_path)
        self._passed("commit", f"generation {generation_id} is active")
        prune_backups(unit_path, self.deployment.backups_keep)
        generation = self.history.get(generation_id)
        assert generation is not None
        return Outcome(generation, health, notes)

    def _passed(self, step: str, detail: str = "") -> None:
        """Pass the step's fault point, then tell the step hook."""
        self._fault(step)
        self._tell(step, detail)

    def _tell(self, step: str, detail: str) -> None:
        if self._on_step is None:
            return
        try:
            self._on_step(step, detail)
        except Exception:  # a listener's bug must not change the transaction's course
            log.exception("step hook failed at %s", step)

    def _reached(self, intent: intents.Intent, step: str, detail: str = "") -> None:
        """Record in the intent that `step` is done, then pass the step's fault point."""
        intent.step = step
        intents.save(intent, self._intent_path)
        self._passed(step, detail)

    def _apply(self, intent: intents.Intent, target: Target, current: str | None,
               backup: Path | None) -> tuple[float, HealthResult]:
        """The steps after the intent: backup, write, reload, restart, gate. Raises on any failure."""
        unit_path = self.deployment.unit_path
        if current is not None and backup is not None:
            self.store.put(current)
            atomic_write(backup, current.encode("utf-8"), fault_name="backup")
        self._reached(intent, "backup", f"old unit kept as {backup.name}" if backup else "no unit before")
        for secret, content in target.secrets:
            atomic_write(secret, content.encode("utf-8"), mode=0o600)
        atomic_write(unit_path, target.text.encode("utf-8"), fault_name="unit")
        self._reached(intent, "write", f"new unit written to {unit_path}")
        t_restart = self._clock.monotonic()
        self.systemd.reset_failed(self.unit)
        self.systemd.reload()
        self._reached(intent, "reload", "systemd reloaded its units")
        self.systemd.restart(self.unit)
        restart_s = self._clock.monotonic() - t_restart
        self._reached(intent, "restart", f"{self.unit} restarted in {restart_s:.1f} s")
        health = self._gate(target.base_url, target.alias, timeout_s=target.timeout_s,
                            stability_s=target.stability_s, unit_state=lambda: self.systemd.unit_state(self.unit),
                            api_key=target.api_key)
        self._reached(intent, "gate", f"healthy after {health.total_s:.1f} s")
        return restart_s, health

    def _restore_old(self, intent: intents.Intent) -> str:
        """Put the previous unit back and bring it up; returns a sentence on the state reached."""
        unit_path = self.deployment.unit_path
        installed = self.installed_text()
        untouched = installed is not None and sha256_text(installed) == intent.old_sha256
        if intent.step in UNIT_UNTOUCHED_STEPS and (untouched or (installed is None and not intent.old_existed)):
            return f"nothing was changed: {self.unit} still runs as before"
        old_text: str | None = None
        if intent.old_existed:
            old_text = self.store.get(intent.old_sha256 or "")
            if old_text is None and intent.backup_path:
                old_text = read_text(Path(intent.backup_path))
            if old_text is None:
                current = self.installed_text()
                if current is not None and sha256_text(current) == intent.old_sha256:
                    old_text = current
            if old_text is None:
                raise SwitchFailed(f"cannot revert {self.unit}: the previous unit text is lost "
                                   f"(no backup at {intent.backup_path}); the unit now holds the new profile")
            if self.installed_text() != old_text:
                atomic_write(unit_path, old_text.encode("utf-8"), fault_name="revert-unit")
        else:
            unit_path.unlink(missing_ok=True)
        self._passed("revert-write", "the previous unit is back in place")
        self.systemd.reload()
        self._passed("revert-reload")
        if not intent.old_existed:
            self.systemd.stop(self.unit)
            self.systemd.reload()
            return f"the new unit {self.unit} was removed again (there was none before)"
        if not intent.old_active:
            self.systemd.stop(self.unit)
            return f"{self.unit} is back on {intent.old_profile or 'its previous unit'} (stopped, as it was)"
        if intent.step in NOT_RESTARTED_STEPS and intent.old_main_pid:
            now = self.systemd.unit_state(self.unit)
            if now.running and now.main_pid == intent.old_main_pid:  # interrupted before the restart began
                return (f"reverted to {intent.old_profile or 'the previous unit'} before its server was restarted: "
                        f"it kept running (PID {now.main_pid})")
        self.systemd.reset_failed(self.unit)
        self.systemd.restart(self.unit)
        self._passed("revert-restart")
        assert old_text is not None
        old = target_from_text(old_text, intent.old_profile, where=str(unit_path))
        self._gate(old.base_url, old.alias, timeout_s=old.timeout_s, stability_s=min(old.stability_s, 2.0),
                   unit_state=lambda: self.systemd.unit_state(self.unit), api_key=old.api_key)
        self._passed("revert-gate", f"{intent.old_profile or 'the previous unit'} is healthy again")
        return f"reverted to {intent.old_profile or 'the previous unit'}, which is healthy again"

    def _revert(self, intent: intents.Intent, *, reason: str) -> None:
        journal = self._journal(self.unit, self.deployment.scope)
        self._tell("revert", reason)
        what = f"switch to {intent.profile}" if intent.kind == "switch" else f"{intent.kind} to {intent.profile}"
        try:
            state = self._restore_old(intent)
        except Exception as revert_failure:  # the unit is whatever the last atomic write left: whole
            self.history.finish(intent.generation_id, outcome="failed",
                                detail=f"{reason}; revert failed: {revert_failure}")
            intents.clear(self._intent_path)
            raise SwitchFailed(
                f"{what} failed: {reason}\nthe revert failed too: {revert_failure}\n"
                f"the unit file is the previous one; check `specd status`\n--- journal ---\n{journal}",
                generation_id=intent.generation_id, revert_outcome="failed",
                revert_state=f"the revert failed too: {revert_failure}", journal=journal,
            ) from revert_failure
        self.history.event(self.unit, JOURNAL_EVENT, f"generation {intent.generation_id}\n{journal}")
        self.history.finish(intent.generation_id, outcome="reverted", detail=reason)
        intents.clear(self._intent_path)
        raise SwitchFailed(f"{what} failed: {reason}\n{state}\n--- last lines of {self.unit}'s journal ---\n{journal}",
                           generation_id=intent.generation_id, revert_outcome="reverted", revert_state=state,
                           journal=journal)

    def _recover_locked(self) -> str | None:
        remove_stale_temp_files(self.deployment.unit_path)
        pending = intents.load(self._intent_path)
        if pending is None:
            return None
        log.warning("found an interrupted %s of %s at step %s; reverting", pending.kind, self.unit, pending.step)
        try:
            self._revert(pending, reason="interrupted (specd was killed mid-operation); recovered by reverting")
        except SwitchFailed as done:
            message = str(done).splitlines()[0:2]
            self.history.event(self.unit, "recover", " / ".join(message))
            return " ".join(message)
        return None

    def _rollback_target(self, to: int | None) -> tuple[Generation | None, str]:
        if to is not None:
            wanted = self.history.get(to)
            if wanted is None or wanted.unit != self.unit:
                raise UsageError(f"no generation {to} for {self.unit} (see `specd history`)")
            if wanted.outcome != "ok":
                raise UsageError(f"generation {to} never came up healthy ({wanted.outcome}); pick another")
            content = self.history.get(wanted.content_id) or wanted
        else:
            active = self.history.active(self.unit)
            if active is None:
                return None, self._newest_backup_text()
            base = self.history.get(active.content_id) or active
            if base.previous_id is None:
                raise UsageError(f"nothing to roll back to: generation {base.id} created {self.unit}")
            previous = self.history.get(base.previous_id)
            if previous is None:
                return None, self._newest_backup_text()
            content = self.history.get(previous.content_id) or previous
        text = self.store.get(content.unit_sha256 or "")
        if text is None and content.backup_path is None:
            raise UsageError(f"the unit text of generation {content.id} is no longer stored")
        if text is None:
            text = self._newest_backup_text()
        return content, text

    def _newest_backup_text(self) -> str:
        """The newest .pre-* backup that differs from the installed unit: rollback without history."""
        installed = self.installed_text()
        for backup in list_backups(self.deployment.unit_path):
            text = read_text(backup.path)
            if text is not None and text != installed:
                return text
        raise UsageError(f"nothing to roll back to: no history and no {self.unit}.pre-* backup that differs "
                         "from the installed unit")


def _reason(failure: BaseException) -> str:
    """What went wrong, for history and the user: a SpecdError's message, else the exception."""
    if isinstance(failure, SpecdError):
        return str(failure)
    if isinstance(failure, KeyboardInterrupt):
        return "interrupted (Ctrl-C or SIGTERM)"
    return f"{type(failure).__name__}: {failure}"
