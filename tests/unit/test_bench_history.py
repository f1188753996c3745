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
from specd.errors import UsageError
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
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # the unit file: never the real user's
    found = FakeDeployment(tmp_path)
    found.deployment.unit_path.parent.mkdir(parents=True)
    found.deployment.unit_path.write_text(unit_text("draft"))  # the unit as the owner had it before specd
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


def test_repeated_rollbacks_walk_back_through_earlier_rollbacks_and_past_a_bench(fake: FakeDeployment) -> None:
    """Both rules at once: the walk goes back through an earlier rollback (the first-hour run's
    sequence, tests/unit/test_rollback_walk.py) and every step of it passes over a bench's generations,
    including the rollback with which the bench put the original back."""
    fake.switcher("cli").rollback()  # older, mine, rollback: on older
    start = fake.history.active(UNIT)
    assert start is not None and fake.on() == unit_text("older")
    fake.switcher("bench").switch("ngram")
    fake.switcher("bench").switch("draft")
    fake.switcher("bench").rollback(to=start.id, strategy="auto")
    fake.switcher("cli").switch("ngram")
    first = min(fake.history.list(UNIT), key=lambda g: g.id)  # the unit as found before specd's first switch
    first_text = unit_text(str(first.profile))
    walked = []
    for _ in range(4):
        fake.switcher("cli").rollback()
        walked.append(fake.on())
    # undo the switch to ngram, then the earlier rollback (mine was live before it), then mine, then the start
    assert walked == [unit_text("older"), unit_text("mine"), unit_text("older"), first_text]
    with pytest.raises(UsageError, match="nothing to roll back to"):
        fake.switcher("cli").rollback()
    assert fake.on() == first_text
