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


def _where_a_bench_began(history: History, generation: Generation) -> Generation | None:
    """For a bench's or verify run's last step that ended on the unit it began on (its last block ran
    the original, so it left it as it was): the generation the run began on, which is where the owner
    is. None for any other generation."""
    if generation.trigger not in PASSED_OVER:
        return None
    began = _before_steps(history, generation)
    return began if began is not None and began.unit_sha256 == generation.unit_sha256 else None


def walk_position(history: History, active: Generation) -> Generation:
    """Where `active` stands in the walk back: the generation whose state it is. A switch or a hand
    edit stands for itself; a plain rollback for the generation it stepped back to, so the next
    rollback steps back from there (switch A, B, rollback, switch C, rollback, rollback: A, then B,
    then A), where going by unit text alone would jump to the first A's start and stop. A rollback
    `--to N` (or one that history cannot place) stands for the generation whose text it restored.
    Each step back passes over a bench's or verify run's generations, as `rollback` does, and a run
    that ended on the unit it began on stands for the generation it began on."""
    chain: list[Generation] = []  # the run of rollbacks that ends at `active`, newest first
    position = active
    while len(chain) <= 10_000:  # every step goes to an older generation; the bound only guards a loop
        if position.kind == "rollback" and position.restores_id is not None and position.previous_id is not None:
            before = history.get(position.previous_id)
            if before is None:
                break
            chain.append(position)
            position = before
            continue
        began = _where_a_bench_began(history, position)
        if began is None:
            break
        position = began
    if position.kind == "rollback":  # the run's start cannot be placed: its restored text's generation
        position = history.get(position.content_id) or position
    for rollback in reversed(chain):
        stepped_to = _before_steps(history, position)
        if stepped_to is not None and stepped_to.content_id == rollback.restores_id:
            position = stepped_to  # a plain rollback: one step back from where the walk stood
        else:
            position = history.get(rollback.content_id) or rollback  # `--to N`: the generation it restored
    return position


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
        base = walk_position(history, active)
        if base.previous_id is None:
            raise UsageError(f"nothing to roll back to: generation {base.id} is where {unit}'s history begins",
                             hint="`specd history` lists every generation: `specd rollback --to N` goes to any "
                                  "that came up healthy, `specd switch NAME` to any profile")
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
