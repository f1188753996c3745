"""The restart strategy's revert: put the previous unit text back in its slot and bring it up again.

Used by the switch transaction (specd.deploy.switch) when a switch or rollback fails or was
interrupted; the blue-green strategy has its own (specd.deploy.bluegreen). The previous text comes
from the unit store by hash, else the backup file, else the unit itself when it was never replaced.
Each step is reported to `passed` (the switch's step hook and fault points).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from specd.deploy import intent as intents
from specd.deploy.plan import NOT_RESTARTED_STEPS, UNIT_UNTOUCHED_STEPS, HealthGate, target_from_text
from specd.deploy.seams import Seams
from specd.deploy.slots import slot
from specd.deploy.unitfiles import atomic_write, read_text, sha256_text
from specd.errors import SwitchFailed


def previous_text(seams: Seams, intent: intents.Intent, installed: str | None, unit: str) -> str:
    """The unit text before the operation; SwitchFailed when no copy of it is left anywhere."""
    old_text = seams.units.get(intent.old_sha256 or "")
    if old_text is None and intent.backup_path:
        old_text = read_text(Path(intent.backup_path))
    if old_text is None and installed is not None and sha256_text(installed) == intent.old_sha256:
        old_text = installed
    if old_text is None:
        raise SwitchFailed(f"cannot revert {unit}: the previous unit text is lost "
                           f"(no backup at {intent.backup_path}); the unit now holds the new profile")
    return old_text


def restore_previous_unit(seams: Seams, intent: intents.Intent, *, gate: HealthGate,
                          passed: Callable[..., None]) -> str:
    """Put the previous unit back and bring it up as it was; returns a sentence on the state reached."""
    systemd = seams.systemd
    unit_path, unit = Path(intent.unit_path), slot(seams.deployment, intent.slot).unit
    installed = read_text(unit_path)
    untouched = installed is not None and sha256_text(installed) == intent.old_sha256
    if intent.step in UNIT_UNTOUCHED_STEPS and (untouched or (installed is None and not intent.old_existed)):
        return f"nothing was changed: {unit} still runs as before"
    old_text: str | None = None
    if intent.old_existed:
        old_text = previous_text(seams, intent, installed, unit)
        if read_text(unit_path) != old_text:
            atomic_write(unit_path, old_text.encode("utf-8"), fault_name="revert-unit")
    else:
        unit_path.unlink(missing_ok=True)
    passed("revert-write", "the previous unit is back in place")
    systemd.reload()
    passed("revert-reload")
    previous = intent.old_profile or "the previous unit"
    if old_text is None:
        systemd.stop(unit)
        systemd.reload()
        return f"the new unit {unit} was removed again (there was none before)"
    if not intent.old_active:
        systemd.stop(unit)
        return f"{unit} is back on {intent.old_profile or 'its previous unit'} (stopped, as it was)"
    if intent.step in NOT_RESTARTED_STEPS and intent.old_main_pid:
        now = systemd.unit_state(unit)
        if now.running and now.main_pid == intent.old_main_pid:  # interrupted before the restart began
            return f"reverted to {previous} before its server was restarted: it kept running (PID {now.main_pid})"
    systemd.reset_failed(unit)
    systemd.restart(unit)
    passed("revert-restart")
    old = target_from_text(old_text, intent.old_profile, where=str(unit_path))
    gate(old.base_url, old.alias, timeout_s=old.timeout_s, stability_s=min(old.stability_s, 2.0),
         unit_state=lambda: systemd.unit_state(unit), api_key=old.api_key)
    passed("revert-gate", f"{previous} is healthy again")
    return f"reverted to {previous}, which is healthy again"
