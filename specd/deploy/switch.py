"""Switch, rollback and recovery: what to install, then the transaction that installs it.

preflight -> intent -> the plan's steps -> commit, each a named checkpoint (`SPECD_FAULT=<step>`
kills the process there, for crash tests). The steps are a plan run by the transaction engine
(specd.deploy.transaction, specd.deploy.plans): *restart* replaces the server in the slot that
serves (specd.deploy.slots), *blue-green* starts the new one in the free slot and flips the proxy
to it, and `--strategy auto` picks blue-green when clients come through the daemon's proxy and
both servers fit (specd.deploy.bluegreen.choose). Any exception after `intent` (a health or
systemd failure, a disk error, a bug, Ctrl-C) reverts the steps begun, last first: when the unit
file was not yet replaced nothing is restarted; otherwise the previous unit is put back,
restarted and health-gated, and SwitchFailed says why. A kill anywhere is undone by the next
*mutating* specd command or the daemon (`recover`) from the intent on disk; read-only commands
only report a pending intent. This module keeps the history: a generation per operation, its
outcome when it commits or reverts.

The seams (`Seams`: state paths, history, systemd client, clock; plus the health gate, journal
reader, fault hook, preflight and step hook) are passed in; `specd.context` builds the real ones,
tests pass fakes. The step hook (`on_step(step, detail)`) hears each step as it passes, so the
status page can show a switch live; it must not raise.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager

from specd.deploy import intent as intents
from specd.deploy.bluegreen import SlotPlan, choose, stop_stray_free_slot
from specd.deploy.candidate import recover_candidate
from specd.deploy.capacity import Capacity, CapacityCheck, capacity_check
from specd.deploy.companions import companion_commands
from specd.deploy.health import wait_healthy
from specd.deploy.history import Generation, History, Trigger
from specd.deploy.plan import (
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
from specd.deploy.plans import BLUE_GREEN_REVERT_STEPS, BLUE_GREEN_STEPS, PLANS, REVERT_STEPS, STEPS
from specd.deploy.preflight import Preflight, port_holders, run_preflight
from specd.deploy.rollback import rollback_target
from specd.deploy.seams import Seams
from specd.deploy.slots import Slot, StrategyRequest, same_but_port, slot, slots_of
from specd.deploy.systemd import SystemdClient, journal_tail
from specd.deploy.transaction import Run, Transaction
from specd.deploy.unitfiles import (
    backup_name,
    disk_free,
    prune_backups,
    read_text,
    remove_stale_temp_files,
    sha256_text,
    write_backup,
)
from specd.durable import checkpoint
from specd.endpoint import socket_of
from specd.errors import LockBusy, PreflightError, ProfileError, SpecdError, SwitchFailed
from specd.profiles.config import Deployment
from specd.profiles.load import load_profile
from specd.unit.parse import parse_unit
from specd.unit.render import profile_of_unit

log = logging.getLogger("specd.deploy.switch")
JOURNAL_EVENT = "revert-journal"  # the unit's journal when a switch was reverted: "generation N\n<lines>"
__all__ = ["BLUE_GREEN_REVERT_STEPS", "BLUE_GREEN_STEPS", "REVERT_STEPS", "STEPS", "WRITE_STEPS", "Outcome", "Switcher",
           "Target", "target_from_text"]


class Switcher:
    """Switch, rollback and recovery for one deployment over the seams it is given.

    `specd.context.switcher_for` passes real seams (the daemon's proxy among them: the restart step
    drains it); tests pass a `Seams` over a tmp dir and fakes.
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
            socket = socket_of(target.base_url)
            if socket is not None and self.deployment.proxy is not None:
                raise PreflightError(f"{where} listens on the Unix socket {socket}, and the deployment has a "
                                     "[proxy], which forwards to a TCP port only; nothing was changed",
                                     hint="`specd rollback --to N` to a generation with a TCP port (see `specd "
                                          "history`), or drop [proxy] (clients then connect to the socket)")
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
        """Undo an interrupted operation, if any: a switch or rollback, or a killed shadow bench's
        candidate; returns what was done. With wait=False, skip when the lock is busy."""
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

    def _install(self, plan: SlotPlan, *, kind: intents.SwitchKind, restores_id: int | None, preflight_s: float,
                 started: float, notes: tuple[str, ...]) -> Outcome:
        target, old_slot, new_slot = plan.target, plan.old, plan.new
        current = read_text(old_slot.unit_path)
        previous = self.history.active(self.unit)
        old_profile = profile_of_unit(current) if current else None
        backup = backup_name(self.deployment.unit_path, old_profile) if current is not None else None
        if current is not None and disk_free(new_slot.unit_path.parent) < 2 * len(current.encode()) + 8192:
            raise SwitchFailed(f"{new_slot.unit_path.parent}: not enough free disk space for a backup; "
                               "nothing was changed")
        generation_id = self.history.add(
            self.unit, kind=kind, profile=target.profile, unit_sha256=self.store.put(target.text), backup_path=backup,
            previous_id=previous.id if previous else None, trigger=self.trigger, restores_id=restores_id,
            slot=new_slot.name, strategy=plan.strategy,
        )
        intent = intents.Intent(self.unit, kind, plan.strategy, target.profile, old_profile, old_slot.name,
                                new_slot.name, generation_id, str(backup) if backup else None)
        transaction = self._transaction(intent, target=target, current=current)
        transaction.begin()
        try:
            # inside the try: Ctrl-C right after the intent reverts ("nothing was changed")
            self._passed("intent", f"generation {generation_id}: {kind} to {target.profile or 'the previous unit'}")
            transaction.apply()
        except (Exception, KeyboardInterrupt) as failure:  # bugs and Ctrl-C revert too; a kill is recovered later
            self._revert(transaction, reason=_reason(failure))
            raise AssertionError("unreachable: _revert raises") from failure  # pragma: no cover
        run = transaction.run
        assert run.health is not None  # every plan ends with the gate
        # What the switch itself found worth keeping; "no GPU: VRAM check skipped" on every row is not.
        kept = [note for note in (*notes, *run.notes) if "VRAM check skipped" not in note]
        self.history.finish(generation_id, outcome="ok", detail=" ".join(kept), preflight_s=preflight_s,
                            restart_s=run.restart_s, health_s=run.health.total_s,
                            total_s=self._clock.monotonic() - started)
        transaction.clear()
        self._passed("commit", f"generation {generation_id} is active")
        prune_backups(self.deployment.unit_path, self.deployment.backups_keep)
        generation = self.history.get(generation_id)
        assert generation is not None
        return Outcome(generation, run.health, (*notes, *run.notes))

    def _transaction(self, intent: intents.Intent, *, target: Target | None = None,
                     current: str | None = None) -> Transaction:
        run = Run(self.seams, intent, self._gate, self._passed, target=target, current=current)
        return Transaction(PLANS[intent.strategy], run, self._intent_path)

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

    def _revert(self, transaction: Transaction, *, reason: str) -> None:
        intent = transaction.intent
        failed_unit = slot(self.deployment, intent.slot).unit
        journal = self._journal(failed_unit, self.deployment.scope)
        self._tell("revert", reason)
        what = f"{intent.kind} to {intent.profile}"
        generation_id = intent.generation_id or 0
        try:
            state = transaction.revert()
        except Exception as revert_failure:  # the unit is whatever the last atomic write left: whole
            self.history.finish(generation_id, outcome="failed", detail=f"{reason}; revert failed: {revert_failure}")
            transaction.clear()
            raise SwitchFailed(
                f"{what} failed: {reason}\nthe revert failed too: {revert_failure}\n"
                f"the unit file is the previous one; check `specd status`\n--- journal ---\n{journal}",
                generation_id=intent.generation_id, revert_outcome="failed",
                revert_state=f"the revert failed too: {revert_failure}", journal=journal,
            ) from revert_failure
        self.history.event(self.unit, JOURNAL_EVENT, f"generation {generation_id}\n{journal}")
        self.history.finish(generation_id, outcome="reverted", detail=reason)
        transaction.clear()
        raise SwitchFailed(f"{what} failed: {reason}\n{state}\n--- last lines of {failed_unit}'s journal ---\n"
                           f"{journal}",
                           generation_id=intent.generation_id, revert_outcome="reverted", revert_state=state,
                           journal=journal)

    def _recover_locked(self) -> str | None:
        for each in slots_of(self.deployment):
            remove_stale_temp_files(each.unit_path)
        candidate = recover_candidate(self.seams, gate=self._gate, fault=self._fault)  # a killed shadow bench's
        if candidate:
            log.warning("%s: %s", self.unit, candidate)
        pending = intents.load(self._intent_path)
        if pending is None:
            stray = stop_stray_free_slot(self.seams)
            if stray:
                log.warning("%s: %s", self.unit, stray)
            return candidate
        log.warning("found an interrupted %s of %s at step %s; reverting", pending.kind, self.unit, pending.step)
        try:
            self._revert(self._transaction(pending),
                         reason="interrupted (specd was killed mid-operation); recovered by reverting")
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
