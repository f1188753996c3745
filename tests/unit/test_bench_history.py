"""A bench's switches stay out of `specd rollback`'s walk (issue 37, item 9): over fake seams, in milliseconds.

What the owner relies on: after a bench or a dry run, `rollback` goes to what they had before their
own last switch, never to a state a bench passed through — whether the bench ended by putting the
original back (a rollback to its generation, as specd.tune.targets.DeploymentTarget.settle does), by
switching on to a winner, or was killed half way.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specd.deploy.history import History, Trigger
from specd.deploy.preflight import Preflight
from specd.deploy.seams import Seams
from specd.deploy.switch import Switcher
from specd.gpu.gguf import GgufInfo
from specd.paths import StateDir
from specd.profiles.config import Deployment
from specd.profiles.load import load_profile
from tests.unit.test_transaction import UNIT, FakeGate, FakeSystemdClient, unit_text


class FakeDeployment:
    def __init__(self, root: Path) -> None:
        profiles = root / "profiles"
        profiles.mkdir()
        for name in ("older", "mine", "ngram", "draft"):
            (profiles / f"{name}.toml").write_text(
                f'binary = "/opt/llama-server"\nmodel = "/m/{name}.gguf"\nalias = "tiny"\nport = 8080\n'
                "health_timeout_s = 5\nstability_s = 0\n")
        self.state = StateDir(root / "state" / "specd")
        self.deployment = Deployment(UNIT, "user", profiles)
        self.history = History(self.state.db)
        self.systemd = FakeSystemdClient()

    def switcher(self, trigger: Trigger) -> Switcher:
        def fake_preflight(deployment: Deployment, name: str, *, current_main_pid: int = 0) -> Preflight:
            return Preflight(load_profile(deployment.profiles_dir, name), [], unit_text(name),
                             GgufInfo.__new__(GgufInfo), None)

        seams = Seams(self.deployment, self.state, self.history, connect=lambda: self.systemd)
        return Switcher(seams, trigger=trigger, gate=FakeGate(), journal=lambda unit, scope: "(fake journal)",
                        preflight=fake_preflight)

    def on(self) -> str:
        return self.deployment.unit_path.read_text()


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeDeployment:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "environment-state"))
    found = FakeDeployment(tmp_path)
    found.switcher("cli").switch("older")
    found.switcher("cli").switch("mine")
    return found


def bench_steps(fake: FakeDeployment) -> int:
    """A bench's switches through the candidates; the generation the owner was on when it began."""
    start = fake.history.active(UNIT)
    assert start is not None and start.profile == "mine"
    fake.switcher("bench").switch("ngram")
    fake.switcher("bench").switch("draft")
    return start.id


def test_after_a_bench_put_the_original_back_rollback_goes_to_the_owners_previous(fake: FakeDeployment) -> None:
    start = bench_steps(fake)
    fake.switcher("bench").rollback(to=start, strategy="auto")  # the bench's ending
    assert fake.on() == unit_text("mine")
    fake.switcher("cli").rollback()
    assert fake.on() == unit_text("older")  # not "draft", where the bench had been


def test_after_the_tuner_switched_to_a_winner_rollback_goes_to_what_the_owner_had(fake: FakeDeployment) -> None:
    start = bench_steps(fake)
    fake.switcher("bench").rollback(to=start, strategy="auto")
    fake.switcher("tuner").switch("ngram")
    fake.switcher("cli").rollback()
    assert fake.on() == unit_text("mine")


def test_a_bench_that_ended_on_the_original_is_where_the_owner_is(fake: FakeDeployment) -> None:
    """Its last block ran the original, so it is left as it is (no restart): rollback still goes past it."""
    bench_steps(fake)
    fake.switcher("bench").switch("mine")
    fake.switcher("cli").rollback()
    assert fake.on() == unit_text("older")


def test_a_bench_killed_half_way_is_passed_over_too(fake: FakeDeployment) -> None:
    bench_steps(fake)  # never put back: the process died
    fake.switcher("cli").rollback()
    assert fake.on() == unit_text("mine")  # the generation before the bench's, not "ngram"
