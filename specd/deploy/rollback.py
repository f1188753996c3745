"""What `specd rollback` goes back to: the generation before the active one (or `--to GEN`), its
unit text from the content store, or — without history — the newest `.pre-*` backup that differs
from the installed unit. Read-only; the Switcher installs what this finds.

Walking back passes over the generations a bench or a verify run made on its way (trigger "bench" or
"verify": steps, not choices; a bench that was killed before it could put the original back leaves
them as the newest), so a rollback lands on what the owner or the tuner chose last."""

from __future__ import annotations

from pathlib import Path

from specd.deploy.history import Generation, History, Trigger
from specd.deploy.unitfiles import ContentStore, list_backups, read_text
from specd.errors import UsageError

PASSED_OVER: frozenset[Trigger] = frozenset({"bench", "verify"})


def _before_steps(history: History, generation: Generation) -> Generation | None:
    """The newest generation before `generation` that a bench or verify run did not make (the oldest step
    when every one before it is a step)."""
    previous = history.get(generation.previous_id) if generation.previous_id is not None else None
    while previous is not None and previous.trigger in PASSED_OVER and previous.previous_id is not None:
        previous = history.get(previous.previous_id)
    return previous


def newest_backup_text(unit: str, unit_path: Path, installed: str | None) -> str:
    """The newest .pre-* backup beside the deployment's unit that differs from the installed unit."""
    for backup in list_backups(unit_path):
        text = read_text(backup.path)
        if text is not None and text != installed:
            return text
    raise UsageError(f"nothing to roll back to: no history and no {unit}.pre-* backup that differs "
                     "from the installed unit")


def rollback_target(history: History, store: ContentStore, unit: str, unit_path: Path, installed: str | None,
                    to: int | None) -> tuple[Generation | None, str]:
    """(the generation whose unit text to restore, or None when it comes from a backup; that text)."""
    if to is not None:
        wanted = history.get(to)
        if wanted is None or wanted.unit != unit:
            raise UsageError(f"no generation {to} for {unit} (see `specd history`)")
        if wanted.outcome != "ok":
            raise UsageError(f"generation {to} never came up healthy ({wanted.outcome}); pick another")
        content = history.get(wanted.content_id) or wanted
    else:
        active = history.active(unit)
        if active is None:
            return None, newest_backup_text(unit, unit_path, installed)
        base = history.get(active.content_id) or active
        if base.trigger in PASSED_OVER:  # a bench that ended where it began: that generation is where we are
            began = _before_steps(history, base)
            if began is not None and began.unit_sha256 == base.unit_sha256:
                base = history.get(began.content_id) or began
        if base.previous_id is None:
            raise UsageError(f"nothing to roll back to: generation {base.id} created {unit}")
        previous = _before_steps(history, base)
        if previous is None:
            return None, newest_backup_text(unit, unit_path, installed)
        content = history.get(previous.content_id) or previous
    text = store.get(content.unit_sha256 or "")
    if text is None and content.backup_path is None:
        raise UsageError(f"the unit text of generation {content.id} is no longer stored")
    if text is None:
        text = newest_backup_text(unit, unit_path, installed)
    return content, text
