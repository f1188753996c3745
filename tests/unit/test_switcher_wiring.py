"""What the Switcher passes between its parts, as a user meets it: who holds the lock and how long a command
waits for it, the failed unit's journal and the history row after a failed switch, and the running server's
PID handed to the preflight (whose VRAM check counts that server's memory as freed by a restart).
Over the transaction's FAKE systemd client and health gate (tests/unit/test_transaction.py)."""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from specd.deploy import intent as intents
from specd.deploy.preflight import Preflight
from specd.deploy.seams import Seams
from specd.deploy.switch import Switcher
from specd.errors import HealthError, LockBusy, SwitchFailed
from specd.gpu.gguf import GgufInfo
from specd.profiles.config import Deployment
from specd.profiles.load import load_profile
from tests.unit.test_transaction import UNIT, FaultAt, RecordingGate, World, make_world, unit_text


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return make_world(tmp_path, monkeypatch)


def quick(world: World) -> World:
    """The same world with a lock wait of 0.3 s instead of 10."""
    return replace(world, deployment=replace(world.deployment, lock_timeout_s=0.3))


def test_a_command_that_meets_the_lock_names_what_holds_it(world: World) -> None:
    with world.switcher().lock("switch mtp"), pytest.raises(LockBusy) as busy:
        quick(world).switcher().switch("new")
    said = str(busy.value)
    assert re.search(rf"{UNIT} is busy: pid {os.getpid()} \(switch mtp, since \d{{4}}-\d\d-\d\dT\d\d:", said), said


def test_recording_a_hand_edit_never_waits_for_the_lock(world: World) -> None:
    world.unit_path.write_text(unit_text("old") + "# edited by hand\n")
    with world.switcher().lock("switch mtp"):
        started = time.monotonic()
        with pytest.raises(LockBusy):
            world.switcher().record_external_edit()  # the watcher: the lock's holder will see the edit itself
        assert time.monotonic() - started < 5.0  # not the deployment's 10 s wait
    assert world.switcher().record_external_edit() is not None


def test_recovery_without_waiting_skips_a_busy_lock_and_a_missing_intent(world: World) -> None:
    with world.switcher().lock("switch mtp"):
        assert world.switcher().recover(wait=False) is None  # no intent: the lock is not even asked for
    intents.save(intents.Intent(UNIT, "switch", "restart", "new", "old", "blue", "blue"), world.state.intent(UNIT))
    with world.switcher().lock("switch mtp"):
        started = time.monotonic()
        assert world.switcher().recover(wait=False) is None  # busy: the daemon comes back to it
        assert time.monotonic() - started < 5.0  # at once, not after the deployment's 10 s lock wait
        with pytest.raises(LockBusy):
            quick(world).switcher().recover()  # waits, then says who holds it
    assert world.switcher().recover(wait=False) is not None  # free: recovered without waiting for anything


def test_recovery_waits_for_a_lock_that_is_let_go_within_the_wait(world: World) -> None:
    intents.save(intents.Intent(UNIT, "switch", "restart", "new", "old", "blue", "blue"), world.state.intent(UNIT))
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with world.switcher().lock("switch mtp"):
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(10)
    threading.Timer(0.5, release.set).start()  # let go while recovery waits (the deployment allows 10 s)
    try:
        assert world.switcher().recover() is not None
    finally:
        release.set()
        holder.join()


def test_a_failed_switch_reports_the_failed_units_journal_and_records_why(world: World) -> None:
    asked: list[tuple[str, str]] = []
    world.gate.failures.append(HealthError("the alias never answered"))
    seams = Seams(world.deployment, world.state, world.history, connect=lambda: world.systemd)
    switcher = Switcher(seams, gate=world.gate, fault=FaultAt(),
                        journal=lambda unit, scope: asked.append((unit, scope)) or "journal of the failed unit",
                        preflight=preflight_of(world))
    with pytest.raises(SwitchFailed) as failed:
        switcher.switch("new")
    assert asked == [(UNIT, "user")]
    assert failed.value.journal == "journal of the failed unit"
    assert failed.value.revert_outcome == "reverted" and failed.value.generation_id is not None
    row = world.history.get(failed.value.generation_id)
    assert row is not None and row.outcome == "reverted" and "the alias never answered" in row.detail


def test_a_switch_whose_revert_fails_too_says_so_in_history_and_in_its_error(world: World) -> None:
    world.gate.failures.extend([HealthError("new is down"), HealthError("old is down too")])
    with pytest.raises(SwitchFailed) as failed:
        world.switcher().switch("new")
    assert failed.value.revert_outcome == "failed" and failed.value.journal == "(fake journal)"
    assert failed.value.generation_id is not None
    row = world.history.get(failed.value.generation_id)
    assert row is not None and row.outcome == "failed"
    assert "new is down" in row.detail and "revert failed: " in row.detail and "old is down too" in row.detail


def preflight_of(world: World, seen: list[int] | None = None):  # type: ignore[no-untyped-def]
    def fake_preflight(deployment: Deployment, name: str, *, current_main_pid: int = 0) -> Preflight:
        if seen is not None:
            seen.append(current_main_pid)
        return Preflight(load_profile(deployment.profiles_dir, name), [], unit_text(name), GgufInfo.__new__(GgufInfo),
                         None)
    return fake_preflight


def test_the_preflight_is_told_the_running_servers_pid_and_none_when_nothing_runs(world: World,
                                                                                 tmp_path: Path) -> None:
    seen: list[int] = []
    seams = Seams(world.deployment, world.state, world.history, connect=lambda: world.systemd)
    switcher = Switcher(seams, gate=world.gate, fault=FaultAt(), journal=lambda unit, scope: "",
                        preflight=preflight_of(world, seen))
    switcher.switch("new")
    assert seen == [world.systemd.main_pid - 1]  # the PID before the switch restarted it
    world.unit_path.unlink()
    world.systemd.active = False
    switcher.switch("old")
    assert seen[-1] == 0


def test_a_unit_file_deleted_during_a_failed_switch_is_put_back(world: World) -> None:
    def delete_then_fail(step: str) -> None:
        if step == "gate":
            world.unit_path.unlink()  # someone removed the unit while the new server was gated
            raise RuntimeError("a bug in the gate")

    with pytest.raises(SwitchFailed) as failed:
        world.switcher(fault=delete_then_fail).switch("new")  # type: ignore[arg-type]
    assert failed.value.revert_outcome == "reverted"
    assert world.unit_path.read_text() == unit_text("old")


def test_a_hand_edit_is_recorded_with_a_backup_of_what_specd_had_installed(world: World) -> None:
    active = world.history.active(UNIT)
    assert active is not None
    world.unit_path.write_text(unit_text("old") + "Environment=EDITED=1\n")
    edit = world.switcher().record_external_edit()
    assert edit is not None and edit.kind == "external-edit" and edit.previous_id == active.id
    assert edit.detail == "the unit file was edited outside specd" and edit.profile == "old"
    assert edit.backup_path is not None and Path(edit.backup_path).read_text() == unit_text("old")
    assert edit.backup_path.endswith("-old")  # named after the profile it held
    assert world.switcher().record_external_edit() is None  # recorded once: the file is now what history says


def test_switching_to_the_active_profile_changes_nothing_and_says_so(world: World) -> None:
    active = world.history.active(UNIT)
    calls = len(world.systemd.calls)
    outcome = world.switcher().switch("old")
    assert outcome.unchanged and outcome.generation == active and outcome.health is None
    assert "already on profile old" in outcome.notes and len(world.systemd.calls) == calls


def test_a_switch_is_gated_as_its_profile_says_and_reports_the_gates_result(world: World) -> None:
    (world.deployment.profiles_dir / "slow.toml").write_text(
        'binary = "/opt/llama-server"\nmodel = "/m/slow.gguf"\nalias = "tiny"\nport = 8080\n'
        "health_timeout_s = 77\nstability_s = 3\n")
    world.gate = gate = RecordingGate()
    outcome = world.switcher().switch("slow")
    asked = gate.asked[-1]
    assert (asked["alias"], asked["timeout_s"], asked["stability_s"]) == ("tiny", 77, 3)
    assert outcome.health is not None and outcome.health.ok
    backups = sorted(world.unit_path.parent.glob(f"{UNIT}.pre-*"))
    assert backups and backups[-1].name.endswith("-old") and backups[-1].read_text() == unit_text("old")


def test_a_profiles_key_file_is_written_private_before_its_unit(world: World, tmp_path: Path) -> None:
    key_file = tmp_path / "secrets" / "new.key"
    key_file.parent.mkdir()
    order: list[str] = []

    def preflight(deployment: Deployment, name: str, *, current_main_pid: int = 0) -> Preflight:
        return Preflight(load_profile(deployment.profiles_dir, name), [], unit_text(name), GgufInfo.__new__(GgufInfo),
                         None, secrets=((key_file, "sk-test-1234"),))

    def note(step: str) -> None:
        if step == "gate":
            order.append(f"key {'there' if key_file.exists() else 'missing'} at the gate")

    seams = Seams(world.deployment, world.state, world.history, connect=lambda: world.systemd)
    Switcher(seams, gate=world.gate, fault=note, journal=lambda unit, scope: "", preflight=preflight).switch("new")
    assert key_file.read_text() == "sk-test-1234" and key_file.stat().st_mode & 0o777 == 0o600
    assert order == ["key there at the gate"]
