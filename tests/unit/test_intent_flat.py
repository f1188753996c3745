"""An intent record written by the specd before the transaction engine (one flat record, `step` only) is
read into today's form, so that an upgrade in the middle of a crashed switch can still undo it
(specd.deploy.intent). The flat records' keys and defaults are those that specd wrote; recovering such a
record end to end is test_plans::test_a_flat_blue_green_intent_of_the_previous_specd_is_recovered."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specd.deploy import intent as intents

# the keys every flat record had; the rest were added over releases and may be missing
FLAT = {"unit": "llama.service", "kind": "switch", "profile": "new", "old_profile": "old", "generation_id": 7,
        "backup_path": "/u/llama.service.pre-x", "unit_path": "/u/llama.service", "old_sha256": "aa" * 32,
        "old_active": True, "old_existed": True}


def read(tmp_path: Path, record: dict[str, Any]) -> intents.Intent:
    path = tmp_path / "intent.json"
    path.write_text(json.dumps(record))
    loaded = intents.load(path)
    assert loaded is not None, "the record was judged corrupt"
    return loaded


def test_a_record_of_the_first_releases_is_a_restart_not_yet_begun_with_the_old_defaults(tmp_path: Path) -> None:
    loaded = read(tmp_path, FLAT)
    assert (loaded.strategy, loaded.step, loaded.done) == ("restart", "intent", [])
    assert (loaded.old_slot, loaded.slot) == ("blue", "blue")
    assert loaded.value("restart", "main_pid") == 0  # no PID saved: nothing to compare a live server with
    assert loaded.value("restart", "active") is True and loaded.value("restart", "existed") is True
    assert loaded.value("restart", "sha256") == "aa" * 32
    assert loaded.value("enable", "enabled") is False
    assert loaded.value("write", "path") == "/u/llama.service" and loaded.value("write", "before") == "aa" * 32


@pytest.mark.parametrize(("step", "done"), [
    ("backup", ["backup"]), ("reload", ["backup", "write", "reload"]),
    ("gate", ["backup", "write", "reload", "restart", "gate"])])
def test_a_restart_records_step_is_the_last_step_done(tmp_path: Path, step: str, done: list[str]) -> None:
    loaded = read(tmp_path, {**FLAT, "step": step, "old_main_pid": 4321})
    assert loaded.done == done and loaded.step == step
    assert loaded.value("restart", "main_pid") == 4321


def test_a_blue_green_record_saves_the_old_server_under_stop_old_and_the_slot_files_text(tmp_path: Path) -> None:
    loaded = read(tmp_path, {**FLAT, "strategy": "blue-green", "step": "flip", "old_slot": "green", "slot": "blue",
                             "slot_old_sha256": "bb" * 32, "old_enabled": True, "old_main_pid": 99})
    assert loaded.done == ["backup", "write", "reload", "start", "gate", "flip"]
    assert (loaded.old_slot, loaded.slot) == ("green", "blue")
    assert loaded.value("stop-old", "main_pid") == 99 and loaded.value("restart", "main_pid") is None
    assert loaded.value("write", "before") == "bb" * 32  # the slot file's text, not the main unit's
    assert loaded.value("enable", "enabled") is True


def test_a_record_at_a_step_its_plan_does_not_have_has_nothing_done(tmp_path: Path) -> None:
    assert read(tmp_path, {**FLAT, "step": "flip"}).done == []  # flip is blue-green's, not restart's


def test_a_flat_record_missing_a_key_every_release_wrote_is_set_aside_as_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "intent.json"
    path.write_text(json.dumps({key: value for key, value in FLAT.items() if key != "old_sha256"}))
    assert intents.load(path) is None
    assert not path.exists() and path.with_suffix(".corrupt").exists()
