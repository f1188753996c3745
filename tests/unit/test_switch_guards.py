"""What a switch refuses, writes privately or leaves alone at its edges, over the fake seams of
tests/fakes/switch_world.py: a new server whose port cannot be chosen, a disk with no room for the
backup, a profile's API key (its file, the drain's polls), a server systemd names no PID for, and
one deployment's lock beside another's."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from specd.deploy.history import History
from specd.deploy.seams import Seams
from specd.deploy.unitfiles import list_backups
from specd.errors import LockBusy, PreflightError, SwitchFailed
from specd.paths import StateDir
from specd.profiles.config import Deployment
from specd.unit.parse import parse_unit
from tests.fakes.switch_world import GREEN, UNIT, World, make_world, unit_text

KEYED = ('binary = "/opt/llama-server"\nmodel = "/m/keyed.gguf"\nalias = "tiny"\nport = 8081\napi_key = "sk-test"\n'
         "health_timeout_s = 5\nstability_s = 0\n")


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return make_world(tmp_path, monkeypatch)


def keyed_world(world: World) -> World:
    (world.deployment.profiles_dir / "keyed.toml").write_text(KEYED)
    return world


@pytest.mark.parametrize("strategy", ["restart", "blue-green"])
def test_a_profiles_api_key_is_written_to_its_own_file_readable_by_its_owner_only(world: World,
                                                                                 strategy: str) -> None:
    keyed_world(world).switcher().switch("keyed", strategy)  # type: ignore[arg-type]
    unit_file = world.green if strategy == "blue-green" else world.blue
    key_file = Path(str(parse_unit(unit_file.read_text()).option("--api-key-file")))
    assert "sk-test" not in unit_file.read_text()  # the unit names the file, never the key
    assert key_file.read_text() == "sk-test\n"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600


def test_the_old_server_is_drained_with_its_api_key(world: World) -> None:
    """A server started with a key answers 401 to /slots without it; the drain would then stop it at once."""
    keyed_world(world).switcher().switch("keyed", "restart")
    world.load.api_key, world.load.busy_polls = "sk-test", 3
    outcome = world.switcher().switch("new", "blue-green")
    assert world.load.refused == 0 and world.load.reads > 3  # stopped only after it reported idle
    assert any("finished its 1 request(s) in flight" in note for note in outcome.notes)


def test_a_rollback_to_a_unit_specd_did_not_render_cannot_start_beside_on_the_same_port(world: World) -> None:
    """The previous unit was written by hand (no `# specd-profile:` line): its port cannot be rewritten, and
    the serving server holds it. A forced blue-green is refused; auto restarts in place and says why."""
    hand_written = unit_text("old").replace("# specd-profile: old\n", "# written by hand\n")
    world.blue.write_text(hand_written)
    world.switcher().switch("new", "restart")
    before = (world.blue.read_text(), list(world.systemd.calls), len(world.history.list(UNIT)))
    with pytest.raises(PreflightError, match="the new server's port cannot be chosen .*not a unit specd rendered"):
        world.switcher().rollback(strategy="blue-green")
    assert (world.blue.read_text(), world.systemd.calls, len(world.history.list(UNIT))) == before  # nothing changed
    outcome = world.switcher().rollback(strategy="auto")
    assert outcome.generation.strategy == "restart" and world.blue.read_text() == hand_written
    assert any("restart, because the new server's port cannot be chosen" in note for note in outcome.notes)


def test_a_switch_needs_room_for_the_backup_and_the_new_unit_on_the_units_disk(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """The room asked for: the backup and the new unit, each counted at the old unit's size, and 8 KiB
    (8192 bytes) for the file system's own blocks. With one byte less the switch is refused, naming the
    directory, and nothing is changed."""
    size = len(world.blue.read_text().encode())
    free = {"bytes": 2 * size + 8192 - 1}
    monkeypatch.setattr("specd.deploy.switch.disk_free", lambda path: free["bytes"])
    before = (world.blue.read_text(), len(list_backups(world.blue)), len(world.history.list(UNIT)))
    with pytest.raises(SwitchFailed) as refused:
        world.switcher().switch("new", "restart")
    assert refused.value.message == (f"{world.blue.parent}: not enough free disk space for a backup; "
                                     "nothing was changed")
    assert (world.blue.read_text(), len(list_backups(world.blue)), len(world.history.list(UNIT))) == before
    free["bytes"] += 1  # exactly the room asked for
    assert world.switcher().switch("new", "restart").generation.outcome == "ok"


def test_a_server_systemd_names_no_main_pid_for_is_not_lowered(world: World) -> None:
    """PID 0 would name the caller to setpriority(2): specd would lower itself, not the server."""
    world.systemd.without_main_pid = {GREEN}
    with pytest.raises(SwitchFailed, match="the unit does not run"):  # what the gate makes of it
        world.switcher().switch("new", "blue-green")
    assert world.priority.log == []


def test_each_deployment_has_its_own_lock(tmp_path: Path) -> None:
    """Two deployments on one box (two units): a switch of one does not wait for the other's."""
    state = StateDir(tmp_path / "state")

    def seams(unit: str) -> Seams:
        return Seams(Deployment(unit, "user", tmp_path), state, History(state.db), connect=lambda: None)  # type: ignore[arg-type,return-value]

    with seams("llama-a.service").lock("switch a", timeout_s=0):
        with seams("llama-b.service").lock("switch b", timeout_s=0):
            pass  # taken at once
        with pytest.raises(LockBusy, match="llama-a.service is busy"), seams("llama-a.service").lock("again", 0):
            pass
