"""The switch transaction and its inverse, rollback.

Steps, each a named checkpoint (`SPECD_FAULT=<step>` kills the process there, for crash tests):
preflight -> intent -> backup -> write -> reload -> restart -> gate -> commit. The intent record
is rewritten with the step reached after each one. That is the *restart* strategy, in the slot
that serves (specd.deploy.slots); the *blue-green* strategy starts the new server in the free
slot and flips the proxy to it instead (specd.deploy.bluegreen, its own steps and revert), and
`--strategy auto` picks it when clients come through the daemon's proxy and both servers fit.
Any exception after `intent` (a health or
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
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from specd.deploy import intent as intents
from specd.deploy.bluegreen import BlueGreen, SlotPlan, choose, stop_stray_free_slot
from specd.deploy.capacity import Capacity, CapacityCheck, capacity_check
from specd.deploy.companions import companion_commands
from specd.deploy.health import HealthResult, wait_healthy
from specd.deploy.history import Generation, History, Trigger
from specd.deploy.plan import (
    REVERT_STEPS,
    STEPS,
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
from specd.deploy.preflight import Preflight, port_holders, run_preflight
from specd.deploy.restore import restore_previous_unit
from specd.deploy.rollback import rollback_target
from specd.deploy.seams import Seams
from specd.deploy.slots import Slot, StrategyRequest, same_but_port, slot, slots_of
from specd.deploy.systemd import SystemdClient, journal_tail
from specd.deploy.unitfiles import (
    atomic_write,
    backup_name,
    disk_free,
    prune_backups,
    read_text,
    remove_stale_temp_files,
    sha256_text,
    write_backup,
)
from specd.durable import checkpoint
from specd.errors import LockBusy, ProfileError, SpecdError, SwitchFailed
from specd.profiles.config import Deployment
from specd.profiles.load import load_profile
from specd.unit.parse import parse_unit
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
                 preflight: PreflightRunner = run_preflight, on_step: StepHook | None = None,
                 capacity: CapacityCheck | None = None, ports_in_use: Callable[[int], set[int]] = port_holders) -> None:
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
        self._capacity: CapacityCheck = capacity or capacity_check(
            seams.nvml, beside=lambda: companion_commands(seams.deployment))
        self._ports_in_use = ports_in_use
        self._blue_green = BlueGreen(seams, gate=gate, fault=fault, reached=self._reached)

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

    def serving(self) -> Slot:
        """The slot whose server is the alias endpoint now."""
        return self.seams.serving()

    def installed_text(self) -> str | None:
        """The unit text of the serving slot: what specd installed last (or a hand edit of it)."""
        return read_text(self.serving().unit_path)

    def active_profile(self) -> str | None:
        text = self.installed_text()
        return profile_of_unit(text) if text else None

    # -- public operations -------------------------------------------------------------------

    def switch(self, name: str, strategy: StrategyRequest = "auto") -> Outcome:
        """Install profile `name`: in place (restart) or beside the serving server (blue-green);
        `auto` picks blue-green when it can and says why not when it cannot."""
        with self.lock(f"switch {name}"):
            self._recover_locked()
            self._record_edit_locked()
            started = self._clock.monotonic()
            serving = self.serving()
            current = self.installed_text()
            state = self.systemd.unit_state(serving.unit) if current is not None else None
            main_pid = state.main_pid if state is not None else 0
            pre: Preflight = self._preflight(self.deployment, name, current_main_pid=main_pid)
            self._passed("preflight", f"profile {name} is valid and fits this box")
            state = self.systemd.unit_state(serving.unit) if current is not None else None
            if current is not None and same_but_port(current, pre.unit_text) and state is not None and state.running:
                active = self.history.active(self.unit)
                if active is not None:
                    return Outcome(active, None, tuple(pre.notes) + (f"already on profile {name}",), unchanged=True)
            target = Target(pre.unit_text, name, pre.profile.alias, pre.profile.base_url,
                            pre.profile.health_timeout_s, pre.profile.stability_s,
                            pre.profile.api_key, pre.secrets)
            plan = self._plan(strategy, target, current, state is not None and state.running,
                              lambda: self._capacity(pre, parse_unit(current, str(serving.unit_path))
                                                     if current else None))
            return self._install(plan, kind="switch", restores_id=None, preflight_s=pre.seconds,
                                 started=started, notes=(*pre.notes, plan.note))

    def _plan(self, strategy: StrategyRequest, target: Target, current: str | None, running: bool,
              capacity: Callable[[], Capacity]) -> SlotPlan:
        return choose(strategy, self.seams, target, current, running, capacity, self._ports_in_use)

    def _text_capacity(self, text: str, current: str | None) -> Capacity:
        return self._capacity(text, parse_unit(current, str(self.serving().unit_path)) if current else None)

    def rollback(self, to: int | None = None, strategy: StrategyRequest = "restart") -> Outcome:
        """Go back to the unit before the last change (or generation `to`). Restart by default (a
        rollback usually follows a server gone bad); `auto` or `blue-green` as for a switch."""
        with self.lock("rollback" if to is None else f"rollback --to {to}"):
            self._recover_locked()
            if self.history.active(self.unit) is not None:
                self._record_edit_locked()  # without history, rollback works from the .pre-* files
            started = self._clock.monotonic()
            target_gen, text = rollback_target(self.history, self.store, self.unit, self.deployment.unit_path,
                                               self.installed_text(), to)
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
            current = self.installed_text()
            running = current is not None and self.systemd.unit_state(self.serving().unit).running
            plan = self._plan(strategy, target, current, running, lambda: self._text_capacity(text, current))
            return self._install(plan, kind="rollback", restores_id=target_gen.content_id if target_gen else None,
                                 preflight_s=0.0, started=started, notes=(plan.note,))

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

    def _install(self, plan: SlotPlan, *, kind: intents.OperationKind, restores_id: int | None, preflight_s: float,
                 started: float, notes: tuple[str, ...]) -> Outcome:
        target, old_slot, new_slot = plan.target, plan.old, plan.new
        current = read_text(old_slot.unit_path)
        old_state = self.systemd.unit_state(old_slot.unit) if current is not None else None
        previous = self.history.active(self.unit)
        old_profile = profile_of_unit(current) if current else None
        backup = backup_name(self.deployment.unit_path, old_profile) if current is not None else None
        if current is not None and disk_free(new_slot.unit_path.parent) < 2 * len(current.encode()) + 8192:
            raise SwitchFailed(f"{new_slot.unit_path.parent}: not enough free disk space for a backup; "
                               "nothing was changed")
        blue_green = plan.strategy == "blue-green"
        slot_before = read_text(new_slot.unit_path) if blue_green else None
        new_sha = self.store.put(target.text)
        generation_id = self.history.add(
            self.unit, kind=kind, profile=target.profile, unit_sha256=new_sha, backup_path=backup,
            previous_id=previous.id if previous else None, trigger=self.trigger, restores_id=restores_id,
            slot=new_slot.name, strategy=plan.strategy,
        )
        intent = intents.Intent(
            unit=self.unit, unit_path=str(new_slot.unit_path), generation_id=generation_id, profile=target.profile,
            kind=kind, old_existed=current is not None,
            old_active=bool(old_state and old_state.active_state == "active"),
            old_sha256=sha256_text(current) if current is not None else None, old_profile=old_profile,
            backup_path=str(backup) if backup else None, new_sha256=new_sha,
            old_main_pid=old_state.main_pid if old_state is not None and old_state.running else 0,
            strategy=plan.strategy, slot=new_slot.name, old_slot=old_slot.name,
            slot_old_sha256=self.store.put(slot_before) if slot_before is not None else None,
            old_enabled=blue_green and self.systemd.is_enabled(old_slot.unit),
        )
        intents.save(intent, self._intent_path)
        try:
            # inside the try: Ctrl-C right after the intent reverts ("nothing was changed")
            self._passed("intent", f"generation {generation_id}: {kind} to {target.profile or 'the previous unit'}")
            if blue_green:
                restart_s, health, done = self._blue_green.apply(intent, target, current,
                                                                 lambda: self._write_backup(current, backup))
            else:
                restart_s, health = self._apply(intent, target, current, backup)
                done = ()
        except (Exception, KeyboardInterrupt) as failure:  # bugs and Ctrl-C revert too; a kill is recovered later
            self._revert(intent, reason=_reason(failure))
            raise AssertionError("unreachable: _revert raises") from failure  # pragma: no cover
        # What the switch itself found worth keeping; "no GPU: VRAM check skipped" on every row is not.
        kept = [note for note in (*notes, *done) if "VRAM check skipped" not in note]
        self.history.finish(generation_id, outcome="ok", detail=" ".join(kept), preflight_s=preflight_s,
                            restart_s=restart_s, health_s=health.total_s, total_s=self._clock.monotonic() - started)
        intents.clear(self._intent_path)
        self._passed("commit", f"generation {generation_id} is active")
        prune_backups(self.deployment.unit_path, self.deployment.backups_keep)
        generation = self.history.get(generation_id)
        assert generation is not None
        return Outcome(generation, health, (*notes, *done))

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

    def _write_backup(self, current: str | None, backup: Path | None) -> None:
        if current is not None and backup is not None:
            self.store.put(current)
            atomic_write(backup, current.encode("utf-8"), fault_name="backup")

    def _apply(self, intent: intents.Intent, target: Target, current: str | None,
               backup: Path | None) -> tuple[float, HealthResult]:
        """The restart steps after the intent: backup, write, reload, restart, gate. Raises on any failure."""
        unit_path, unit = Path(intent.unit_path), slot(self.deployment, intent.slot).unit
        self._write_backup(current, backup)
        self._reached(intent, "backup", f"old unit kept as {backup.name}" if backup else "no unit before")
        for secret, content in target.secrets:
            atomic_write(secret, content.encode("utf-8"), mode=0o600)
        atomic_write(unit_path, target.text.encode("utf-8"), fault_name="unit")
        self._reached(intent, "write", f"new unit written to {unit_path}")
        t_restart = self._clock.monotonic()
        self.systemd.reset_failed(unit)
        self.systemd.reload()
        self._reached(intent, "reload", "systemd reloaded its units")
        self.systemd.restart(unit)
        restart_s = self._clock.monotonic() - t_restart
        self._reached(intent, "restart", f"{self.unit} restarted in {restart_s:.1f} s")
        health = self._gate(target.base_url, target.alias, timeout_s=target.timeout_s,
                            stability_s=target.stability_s, unit_state=lambda: self.systemd.unit_state(unit),
                            api_key=target.api_key)
        self._reached(intent, "gate", f"healthy after {health.total_s:.1f} s")
        return restart_s, health

    def _restore_old(self, intent: intents.Intent) -> str:
        """Put the previous unit back and bring it up; returns a sentence on the state reached."""
        if intent.strategy == "blue-green":
            return self._blue_green.restore(intent)
        return restore_previous_unit(self.seams, intent, gate=self._gate, passed=self._passed)

    def _revert(self, intent: intents.Intent, *, reason: str) -> None:
        failed_unit = slot(self.deployment, intent.slot).unit
        journal = self._journal(failed_unit, self.deployment.scope)
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
        raise SwitchFailed(f"{what} failed: {reason}\n{state}\n--- last lines of {failed_unit}'s journal ---\n"
                           f"{journal}",
                           generation_id=intent.generation_id, revert_outcome="reverted", revert_state=state,
                           journal=journal)

    def _recover_locked(self) -> str | None:
        for each in slots_of(self.deployment):
            remove_stale_temp_files(each.unit_path)
        pending = intents.load(self._intent_path)
        if pending is None:
            stray = stop_stray_free_slot(self.seams)
            if stray:
                log.warning("%s: %s", self.unit, stray)
            return None
        log.warning("found an interrupted %s of %s at step %s; reverting", pending.kind, self.unit, pending.step)
        try:
            self._revert(pending, reason="interrupted (specd was killed mid-operation); recovered by reverting")
        except SwitchFailed as done:
            message = str(done).splitlines()[0:2]
            self.history.event(self.unit, "recover", " / ".join(message))
            return " ".join(message)
        return None


def _reason(failure: BaseException) -> str:
    """What went wrong, for history and the user: a SpecdError's message, else the exception."""
    if isinstance(failure, SpecdError):
        return str(failure)
    if isinstance(failure, KeyboardInterrupt):
        return "interrupted (Ctrl-C or SIGTERM)"
    return f"{type(failure).__name__}: {failure}"
