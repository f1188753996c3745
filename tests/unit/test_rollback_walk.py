"""`specd rollback`, repeated, walks back through the states the unit was in, one step each time,
as its help says ("repeat to walk further back"), also after rollbacks and switches in between.

Over the transaction's fake seams (tests/unit/test_transaction.py: a FAKE systemd client and health
gate); the unit file, the content store and the history are real files in a tmp dir.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from specd.deploy.history import History
from specd.deploy.unitfiles import backup_name, write_backup
from specd.errors import PreflightError, UsageError
from specd.paths import StateDir
from specd.profiles.config import Deployment, ProxyConfig
from tests.fakes.switch_world import profiles_dir_with
from tests.unit.test_transaction import UNIT, FakeGate, FakeSystemdClient, RecordingGate, World, unit_text


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    profiles = profiles_dir_with(tmp_path, monkeypatch, ("a", "b", "c"), port=8080)  # the unit file: this test's own
    state = StateDir(tmp_path / "state" / "specd")
    return World(Deployment(UNIT, "user", profiles), FakeSystemdClient(), FakeGate(), History(state.db), state)


def rolled_back_to(world: World) -> str:
    outcome = world.switcher().rollback()
    assert world.unit_path.read_text() == unit_text(str(outcome.generation.profile))
    return str(outcome.generation.profile)


def test_repeated_rollbacks_walk_back_through_a_rollback_and_a_switch_in_between(world: World) -> None:
    """The first-hour run's sequence: switch, switch, rollback, switch, rollback, then rollback again
    was refused ("nothing to roll back to: generation 1") though B had been live before."""
    switcher = world.switcher()
    for name in ("a", "b"):
        switcher.switch(name)
    assert rolled_back_to(world) == "a"
    switcher.switch("c")
    assert rolled_back_to(world) == "a"  # undoes c
    assert rolled_back_to(world) == "b"  # undoes the first rollback: b was live before it
    assert rolled_back_to(world) == "a"  # undoes b
    with pytest.raises(UsageError) as refused:
        world.switcher().rollback()
    said = str(refused.value)
    assert "nothing to roll back to" in said and "--to N" in said and "specd switch NAME" in said
    assert world.unit_path.read_text() == unit_text("a")


def test_a_plain_chain_walks_back_one_switch_at_a_time(world: World) -> None:
    for name in ("a", "b", "c"):
        world.switcher().switch(name)
    assert [rolled_back_to(world) for _ in range(2)] == ["b", "a"]


def test_after_a_rollback_to_a_generation_the_walk_goes_on_from_that_generation(world: World) -> None:
    generations = {name: world.switcher().switch(name).generation.id for name in ("a", "b", "c")}
    world.switcher().rollback(to=generations["b"])
    assert rolled_back_to(world) == "a"  # the state before generation b


def test_without_history_a_rollback_installs_the_newest_differing_backup_gated_as_its_profile_says(
        world: World) -> None:
    (world.deployment.profiles_dir / "slow.toml").write_text(
        'binary = "/opt/llama-server"\nmodel = "/m/slow.gguf"\nalias = "tiny"\nport = 8080\n'
        "health_timeout_s = 77\nstability_s = 3\n")
    world.unit_path.parent.mkdir(parents=True, exist_ok=True)
    world.unit_path.write_text("[Service]\nExecStart=/opt/llama-server -m /m/hand.gguf --port 8080\n")
    write_backup(world.unit_path, unit_text("slow"), "slow")
    world.gate = gate = RecordingGate()
    outcome = world.switcher().rollback()
    assert world.unit_path.read_text() == unit_text("slow")
    generation = outcome.generation
    assert (generation.kind, generation.profile, generation.restores_id) == ("rollback", "slow", None)
    assert gate.asked[-1]["timeout_s"] == 77 and gate.asked[-1]["stability_s"] == 3
    assert gate.asked[-1]["base_url"].endswith(":8080") and gate.asked[-1]["alias"] == "tiny"


def test_a_rollback_whose_profile_file_is_gone_is_gated_with_the_defaults(world: World) -> None:
    world.switcher().switch("a")
    world.switcher().switch("b")
    world.gate = gate = RecordingGate()
    (world.deployment.profiles_dir / "a.toml").unlink()
    outcome = world.switcher().rollback()
    assert outcome.generation.profile == "a" and world.unit_path.read_text() == unit_text("a")
    assert gate.asked[-1]["timeout_s"] != 5  # the profile said 5; gone, the gate's defaults apply


def test_a_rollback_to_a_unix_socket_is_refused_behind_the_proxy_and_changes_nothing(world: World) -> None:
    socket_unit = "[Service]\nExecStart=/opt/llama-server -m /m/s.gguf --host /run/tiny.sock\n"
    world.unit_path.parent.mkdir(parents=True, exist_ok=True)
    world.unit_path.write_text(unit_text("a"))
    write_backup(world.unit_path, socket_unit, None)
    proxied = replace(world, deployment=replace(world.deployment, proxy=ProxyConfig(listen_port=9090)))
    with pytest.raises(PreflightError) as refused:
        proxied.switcher().rollback()
    assert "listens on the Unix socket /run/tiny.sock" in str(refused.value)
    assert "newest .pre-* backup" in str(refused.value)
    assert world.unit_path.read_text() == unit_text("a") and not world.systemd.calls
    world.switcher().rollback()  # without a proxy, clients connect to the socket: allowed
    assert world.unit_path.read_text() == socket_unit


def test_a_hand_edit_before_a_rollback_is_recorded_and_kept_in_a_backup(world: World) -> None:
    world.switcher().switch("a")
    world.switcher().switch("b")
    edited = unit_text("b") + "Environment=EDITED=1\n"
    world.unit_path.write_text(edited)
    assert rolled_back_to(world) == "b"  # the edit was a generation of its own: rollback undoes it first
    kinds = [g.kind for g in world.history.list(UNIT)]
    assert kinds[:2] == ["rollback", "external-edit"]


def test_without_history_a_backup_that_is_the_installed_unit_is_passed_over(world: World) -> None:
    hand = "[Service]\nExecStart=/opt/llama-server -m /m/hand.gguf --port 8080\n"
    world.unit_path.parent.mkdir(parents=True, exist_ok=True)
    world.unit_path.write_text(hand)
    write_backup(world.unit_path, unit_text("a"), "a", backup_name(world.unit_path, "a", datetime(2026, 1, 1,
                                                                                                 tzinfo=UTC)))
    write_backup(world.unit_path, hand, None)  # newer, and the same as the unit now
    world.switcher().rollback()
    assert world.unit_path.read_text() == unit_text("a")


def test_a_rollback_after_switching_back_to_an_earlier_profile_goes_to_the_one_before(world: World) -> None:
    for name in ("a", "b", "a"):
        world.switcher().switch(name)
    assert [rolled_back_to(world) for _ in range(2)] == ["b", "a"]


def test_toggling_between_two_profiles_walks_back_through_each_toggle(world: World) -> None:
    for name in ("a", "b", "a", "b", "c"):
        world.switcher().switch(name)
    assert [rolled_back_to(world) for _ in range(4)] == ["b", "a", "b", "a"]


def test_a_rollback_to_an_older_generation_walks_on_from_that_generation_not_from_the_one_before_it(
        world: World) -> None:
    profiles = world.deployment.profiles_dir
    (profiles / "d.toml").write_text((profiles / "c.toml").read_text().replace("/m/c.gguf", "/m/d.gguf"))
    generations = {name: world.switcher().switch(name).generation.id for name in ("a", "b", "c", "d")}
    world.switcher().rollback(to=generations["b"])
    assert rolled_back_to(world) == "a"  # the state before generation b, not the one before d


def test_after_two_rollbacks_and_a_switch_the_walk_goes_back_through_every_state_in_order(world: World) -> None:
    """The unit was a, b, c, then (rolled back) b, a, then d: walking back from d passes each state once,
    newest first: a, b, c, b, a."""
    profiles = world.deployment.profiles_dir
    (profiles / "d.toml").write_text((profiles / "c.toml").read_text().replace("/m/c.gguf", "/m/d.gguf"))
    for name in ("a", "b", "c"):
        world.switcher().switch(name)
    assert [rolled_back_to(world) for _ in range(2)] == ["b", "a"]
    world.switcher().switch("d")
    assert [rolled_back_to(world) for _ in range(5)] == ["a", "b", "c", "b", "a"]
