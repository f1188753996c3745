"""The second server's port, the unit's `.pre-*` backups and the history database's file, as a blue-green
switch, a rollback and `specd history` rely on them (specd.deploy.slots, unitfiles, history)."""

from __future__ import annotations

import shutil
import sqlite3
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from specd.deploy.history import History
from specd.deploy.slots import companion_unit, port_beside, port_of, slot_of_unit, slots_of, spare_port, with_port
from specd.deploy.unitfiles import backup_name, disk_free, list_backups, prune_backups, write_backup
from specd.errors import UsageError
from specd.profiles.config import Deployment, ProxyConfig
from specd.unit.parse import parse_unit

RENDERED = ("# specd-profile: p\n[Unit]\nDescription=x\n\n[Service]\n"
            "ExecStart=/opt/llama-server -m /m/p.gguf --alias tiny {port}--threads 2\nRestart=on-failure\n")


def rendered(port: str = "--port 8080 ") -> str:
    return RENDERED.format(port=port)


@pytest.mark.parametrize("spelling", ["--port 8080 ", "--port=8080 "])
def test_a_rendered_units_port_is_rewritten_in_place_and_nothing_else_changes(spelling: str) -> None:
    text = rendered(spelling)
    moved = with_port(text, 8081)
    assert port_of(moved) == 8081
    before, after = parse_unit(text).argv, parse_unit(moved).argv
    assert len(before) == len(after) and sum(a != b for a, b in zip(before, after, strict=True)) == 1
    others = [line for line in text.splitlines() if not line.startswith("ExecStart=")]
    assert [line for line in moved.splitlines() if not line.startswith("ExecStart=")] == others


def test_a_unit_without_a_port_gets_one_at_the_end_of_its_command_line() -> None:
    moved = with_port(rendered(""), 9000)
    assert parse_unit(moved).argv[-2:] == ["--port", "9000"] and parse_unit(moved).argv[:2] == [
        "/opt/llama-server", "-m"]


def test_a_port_flag_with_no_value_after_it_gets_a_port_added() -> None:
    text = "# specd-profile: p\n[Service]\nExecStart=/opt/llama-server -m /m/p.gguf --port\n"
    assert parse_unit(with_port(text, 9000)).argv[-3:] == ["--port", "--port", "9000"]


@pytest.mark.parametrize(("text", "said"), [
    ("[Service]\nExecStart=/opt/llama-server --port 8080\n", "not a unit specd rendered"),
    ("# specd-profile: p\n[Service]\nExecStart=/opt/llama-server \\\n  --port 8080\n", "ExecStart= is not one line"),
    ("# specd-profile: p\n[Service]\nExecStart=/opt/llama-server --port 8080\nExecStart=/bin/true\n",
     "ExecStart= is not one line"),
])
def test_units_specd_did_not_write_as_one_line_are_not_rewritten(text: str, said: str) -> None:
    with pytest.raises(UsageError, match=f"llama.service: {said}; its port is not rewritten"):
        with_port(text, 9000, "llama.service")


def test_the_spare_port_is_the_proxys_setting_else_the_profiles_port_plus_one(tmp_path: Path) -> None:
    bare = Deployment("u.service", "user", tmp_path)
    assert spare_port(bare, 8080) == 8081
    assert spare_port(Deployment("u.service", "user", tmp_path, proxy=ProxyConfig()), 8080) == 8081
    assert spare_port(Deployment("u.service", "user", tmp_path, proxy=ProxyConfig(spare_port=9999)), 8080) == 9999


def test_a_second_server_takes_its_own_port_unless_the_serving_one_holds_it(tmp_path: Path) -> None:
    bare = Deployment("u.service", "user", tmp_path)
    assert port_beside(bare, rendered(), None) == 8080  # nothing serves
    assert port_beside(bare, rendered(), 7000) == 8080  # free
    assert port_beside(bare, rendered(), 8080) == 8081
    with_spare = Deployment("u.service", "user", tmp_path, proxy=ProxyConfig(spare_port=9000))
    assert port_beside(with_spare, rendered(), 8080) == 9000  # the [proxy] spare_port the user set
    spare_is_serving = Deployment("u.service", "user", tmp_path, proxy=ProxyConfig(spare_port=7000))
    assert port_beside(spare_is_serving, rendered("--port 7000 "), 7000) == 7001  # never the serving one


def test_backups_are_listed_newest_first_and_only_this_units(tmp_path: Path) -> None:
    unit = tmp_path / "llama.service"
    start = datetime(2026, 11, 1, tzinfo=UTC)
    made = [backup_name(unit, f"p{n}", start + timedelta(minutes=n)) for n in range(3)]
    for path in made:
        path.write_text(path.name)
    backup_name(tmp_path / "llama.service2", "x", start).write_text("another unit's")  # shares the prefix
    (tmp_path / "llama.service.pre-notadate-p").write_text("not a backup name")
    listed = list_backups(unit)
    assert [b.path for b in listed] == made[::-1]
    assert [b.profile for b in listed] == ["p2", "p1", "p0"]
    assert listed[0].stamp == (start + timedelta(minutes=2)).strftime("%Y%m%dT%H%M%S.%fZ")


def test_pruning_keeps_the_newest_and_the_protected_ones(tmp_path: Path) -> None:
    unit = tmp_path / "llama.service"
    start = datetime(2026, 11, 1, tzinfo=UTC)
    made = [write_backup(unit, f"text {n}", "p", backup_name(unit, "p", start + timedelta(minutes=n)))
            for n in range(5)]
    removed = prune_backups(unit, keep=2, protect={made[2]})  # one a pending switch still needs
    assert sorted(removed) == sorted([made[0], made[1]])
    assert sorted(b.path for b in list_backups(unit)) == sorted([made[2], made[3], made[4]])
    assert prune_backups(unit, keep=2, protect={made[2]}) == []


def test_history_reopens_its_database_when_the_file_was_deleted_or_replaced(tmp_path: Path) -> None:
    db = tmp_path / "specd.db"
    history = History(db)
    first = history.add("u.service", kind="switch", profile="a", unit_sha256=None, backup_path=None,
                        previous_id=None, trigger="cli", outcome="ok")
    db.unlink()  # someone removed the state database under the daemon
    again = history.add("u.service", kind="switch", profile="b", unit_sha256=None, backup_path=None,
                        previous_id=first, trigger="cli", outcome="ok")
    assert db.exists() and [g.profile for g in History(db).list("u.service")] == ["b"]
    assert history.get(again) is not None and history.get(again).slot is None  # the added columns exist


def test_history_adds_the_columns_a_newer_specd_reads_to_an_older_database(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    History(db).conn.close()
    with sqlite3.connect(db) as conn:  # an older specd's table: without slot and strategy
        conn.execute("ALTER TABLE generations DROP COLUMN slot")
        conn.execute("ALTER TABLE generations DROP COLUMN strategy")
    reopened = History(db)
    gid = reopened.add("u.service", kind="switch", profile="a", unit_sha256=None, backup_path=None, previous_id=None,
                       trigger="cli", outcome="ok", slot="green", strategy="blue-green")
    generation = reopened.get(gid)
    assert generation is not None and (generation.slot, generation.strategy) == ("green", "blue-green")


def test_a_backup_of_a_unit_holding_a_key_is_as_private_as_the_unit(tmp_path: Path) -> None:
    unit = tmp_path / "llama.service"
    unit.write_text("Environment=LLAMA_API_KEY=sk-secret\n")
    unit.chmod(0o600)
    backup = write_backup(unit, unit.read_text(), "mtp")
    assert backup.stat().st_mode & 0o777 == 0o600
    assert backup.name.startswith("llama.service.pre-") and backup.name.endswith("-mtp")
    unit.chmod(0o640)  # the owner's own choice, no key in it: the backup keeps it too
    assert write_backup(unit, "[Service]\nExecStart=/bin/true\n", None).stat().st_mode & 0o777 == 0o640
    assert list_backups(unit)[0].profile == "unmanaged"


@pytest.fixture
def far_timezone(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The box's local time zone 9 hours from UTC: timestamps that must be UTC would show it."""
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_backup_names_and_history_times_are_utc_whatever_the_boxs_time_zone(tmp_path: Path,
                                                                             far_timezone: None) -> None:
    before = datetime.now(UTC)
    stamp = backup_name(tmp_path / "u.service", "p").name
    assert any(f".pre-{moment:%Y%m%dT%H}" in stamp for moment in (before, datetime.now(UTC)))  # not local time
    history = History(tmp_path / "h.db")
    gid = history.add("u.service", kind="switch", profile="a", unit_sha256=None, backup_path=tmp_path / "b",
                      previous_id=None, trigger="cli", outcome="ok")
    row = history.get(gid)
    assert row is not None and row.created_at.endswith("+00:00") and row.backup_path == str(tmp_path / "b")


def test_free_disk_space_is_measured_where_a_file_will_be_written(tmp_path: Path) -> None:
    """The file's directory's file system (the file does not exist yet). Other tests write meanwhile, so the
    two readings may differ by what they wrote."""
    free = disk_free(tmp_path / "not-yet-written.service")
    assert abs(free - shutil.disk_usage(tmp_path).free) < 64 << 20


def test_each_slot_is_found_by_its_unit_and_a_foreign_unit_by_none(tmp_path: Path) -> None:
    deployment = Deployment("llama.service", "user", tmp_path)
    blue, green = slots_of(deployment)
    assert (blue.name, green.name) == ("blue", "green") and green.unit == companion_unit("llama.service")
    assert slot_of_unit(deployment, "llama.service") == blue and slot_of_unit(deployment, green.unit) == green
    assert slot_of_unit(deployment, "other.service") is None
