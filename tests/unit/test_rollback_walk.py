"""`specd rollback`, repeated, walks back through the states the unit was in, one step each time,
as its help says ("repeat to walk further back"), also after rollbacks and switches in between.

Over the transaction's fake seams (tests/unit/test_transaction.py: a FAKE systemd client and health
gate); the unit file, the content store and the history are real files in a tmp dir.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specd.deploy.history import History
from specd.errors import UsageError
from specd.paths import StateDir
from specd.profiles.config import Deployment
from tests.unit.test_transaction import UNIT, FakeGate, FakeSystemdClient, World, unit_text


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "environment-state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # the unit file: this test's own
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    for name in ("a", "b", "c"):
        (profiles / f"{name}.toml").write_text(
            f'binary = "/opt/llama-server"\nmodel = "/m/{name}.gguf"\nalias = "tiny"\nport = 8080\n'
            "health_timeout_s = 5\nstability_s = 0\n")
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
