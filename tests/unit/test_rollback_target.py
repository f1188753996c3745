"""What `specd rollback` would restore, and every refusal it can give (specd.deploy.rollback.rollback_target):
read-only, over a real history database, a real content store and real `.pre-*` backup files in a tmp dir.
The walk back through rollbacks and switches is tests/unit/test_rollback_walk.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from specd.deploy.history import GenerationKind, GenerationOutcome, History, Trigger
from specd.deploy.rollback import newest_backup_text, rollback_target
from specd.deploy.unitfiles import ContentStore, backup_name
from specd.errors import UsageError

UNIT = "llama-rollback-target.service"


class Box:
    def __init__(self, root: Path) -> None:
        self.history = History(root / "history.db")
        self.store = ContentStore(root / "store")
        self.unit_path = root / "units" / UNIT
        self.unit_path.parent.mkdir(parents=True)
        self.stamp = datetime(2026, 11, 1, tzinfo=UTC)

    def generation(self, text: str, *, previous: int | None = None, outcome: GenerationOutcome = "ok",
                   kind: GenerationKind = "switch", trigger: Trigger = "cli", restores: int | None = None,
                   backup: Path | None = None, stored: bool = True, unit: str = UNIT) -> int:
        digest = self.store.put(text) if stored else "0" * 64
        return self.history.add(unit, kind=kind, profile=text, unit_sha256=digest, backup_path=backup,
                                previous_id=previous, trigger=trigger, outcome=outcome, restores_id=restores)

    def backup(self, text: str) -> Path:
        """A `.pre-*` copy, each newer than the last."""
        self.stamp += timedelta(minutes=1)
        path = backup_name(self.unit_path, "p", self.stamp)
        path.write_text(text)
        return path

    def target(self, installed: str | None, to: int | None = None) -> tuple[int | None, str]:
        generation, text = rollback_target(self.history, self.store, UNIT, self.unit_path, installed, to)
        return (generation.id if generation is not None else None), text


@pytest.fixture
def files(tmp_path: Path) -> Box:
    return Box(tmp_path)


def test_without_history_the_newest_backup_that_differs_from_the_installed_unit_is_restored(files: Box) -> None:
    files.backup("oldest")
    files.backup("older")
    files.backup("installed")  # the newest backup is the unit as it stands: restoring it would change nothing
    assert files.target("installed") == (None, "older")


def test_without_history_or_a_differing_backup_nothing_is_restored_and_the_error_says_why(files: Box) -> None:
    files.backup("installed")
    with pytest.raises(UsageError) as refused:
        files.target("installed")
    assert f"no history and no {UNIT}.pre-* backup that differs from the installed unit" in str(refused.value)
    assert newest_backup_text(UNIT, files.unit_path, "other") == "installed"


def test_a_rollback_goes_to_the_generation_before_the_active_one(files: Box) -> None:
    first = files.generation("a")
    second = files.generation("b", previous=first)
    files.generation("c", previous=second)
    assert files.target("c") == (second, "b")


def test_the_first_generation_has_nothing_before_it(files: Box) -> None:
    first = files.generation("a")
    with pytest.raises(UsageError) as refused:
        files.target("a")
    assert f"generation {first} is where {UNIT}'s history begins" in str(refused.value)


def test_a_generation_whose_predecessor_history_lost_falls_back_to_the_backups(files: Box) -> None:
    files.generation("b", previous=12345)  # the row it came from was pruned
    files.backup("from-backup")
    files.backup("b")  # newer, but the installed unit itself
    assert files.target("b") == (None, "from-backup")


def test_rollback_to_a_generation_restores_its_text(files: Box) -> None:
    first = files.generation("a")
    second = files.generation("b", previous=first)
    files.generation("c", previous=second)
    assert files.target("c", to=first) == (first, "a")


def test_rollback_to_a_generation_a_rollback_made_restores_what_that_rollback_restored(files: Box) -> None:
    first = files.generation("a")
    second = files.generation("b", previous=first)
    again = files.generation("a", previous=second, kind="rollback", restores=first)
    assert files.target("a", to=again) == (first, "a")


@pytest.mark.parametrize("to", [999, "other unit"])
def test_rollback_to_a_generation_that_is_not_this_units_is_refused(files: Box, to: int | str) -> None:
    files.generation("a")
    wanted = 999 if to == 999 else files.generation("x", unit="other.service")
    with pytest.raises(UsageError) as refused:
        files.target("a", to=wanted)
    assert f"no generation {wanted} for {UNIT} (see `specd history`)" in str(refused.value)


@pytest.mark.parametrize("outcome", ["reverted", "failed", "pending"])
def test_rollback_to_a_generation_that_never_came_up_healthy_is_refused(files: Box,
                                                                        outcome: GenerationOutcome) -> None:
    first = files.generation("a")
    bad = files.generation("b", previous=first, outcome=outcome)
    with pytest.raises(UsageError) as refused:
        files.target("a", to=bad)
    assert f"generation {bad} never came up healthy ({outcome}); pick another" in str(refused.value)


def test_a_text_the_store_lost_comes_from_the_backup_the_generation_made(files: Box) -> None:
    backup = files.backup("kept in the backup")
    first = files.generation("a", stored=False, backup=backup)
    files.generation("b", previous=first)
    files.backup("b")  # newer, but the installed unit itself
    assert files.target("b") == (first, "kept in the backup")


def test_a_text_neither_the_store_nor_a_backup_holds_is_refused_by_its_generation(files: Box) -> None:
    first = files.generation("a", stored=False)
    files.generation("b", previous=first)
    with pytest.raises(UsageError) as refused:
        files.target("b")
    assert f"the unit text of generation {first} is no longer stored" in str(refused.value)


def test_looking_changes_nothing(files: Box) -> None:
    first = files.generation("a")
    files.generation("b", previous=first)
    backup = files.backup("b")
    before = (files.history.list(UNIT), sorted(files.unit_path.parent.iterdir()), backup.read_text())
    files.target("b")
    assert (files.history.list(UNIT), sorted(files.unit_path.parent.iterdir()), backup.read_text()) == before


def test_a_rollback_whose_previous_row_was_pruned_stands_for_what_it_restored(files: Box) -> None:
    first = files.generation("a")
    second = files.generation("b", previous=first)
    files.generation("a", previous=second, kind="rollback", restores=first)
    files.history.conn.execute("DELETE FROM generations WHERE id = ?", (second,))  # pruned by the daemon's upkeep
    files.history.conn.commit()
    with pytest.raises(UsageError) as refused:  # it stands for `a`, where history now begins
        files.target("a")
    assert f"generation {first} is where {UNIT}'s history begins" in str(refused.value)
