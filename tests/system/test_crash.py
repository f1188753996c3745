"""kill -9 of specd at every named step of switch, rollback and revert: the next specd command
leaves the box finished or reverted, never half, with the unit file whole."""

from __future__ import annotations

import json
import signal

import pytest

from specd.unit.render import profile_of_unit
from specd.deploy.switch import REVERT_STEPS, STEPS
from tests.conftest import alias_answers
from tests.system.test_switch_failures import add_fake_profile

pytestmark = [pytest.mark.systemd, pytest.mark.llama, pytest.mark.usefixtures("real_server")]


def intent_files(box) -> list[str]:
    return [p.name for p in (box.root / "state" / "specd" / "intents").glob("*.json")]


@pytest.mark.parametrize("step", STEPS)
def test_kill_during_switch_recovers(box, step: str) -> None:
    box.specd("switch", "autoregressive", check=True)
    old_text = box.unit_path.read_text()

    killed = box.specd("switch", "ngram-simple", env={"SPECD_FAULT": step})
    assert killed.returncode == -signal.SIGKILL

    status = json.loads(box.specd("status", "--json", check=True).stdout)
    assert intent_files(box) == []
    text = box.unit_path.read_text()
    if step in ("preflight", "commit"):
        expected = "autoregressive" if step == "preflight" else "ngram-simple"
        assert profile_of_unit(text) == expected
        assert "recovered" not in status
    else:
        assert text == old_text, f"killed at {step}: the unit is not the old one"
        assert "recovered" in status
        history = json.loads(box.specd("history", "--json", check=True).stdout)
        assert history[0]["profile"] == "ngram-simple" and history[0]["outcome"] == "reverted"
    assert status["healthy"] and alias_answers(box.port)
    again = box.specd("switch", "ngram-simple")
    assert again.returncode == 0, again.stderr


@pytest.mark.parametrize("step", ("intent", "write", "restart", "gate"))
def test_kill_during_rollback_recovers(box, step: str) -> None:
    box.specd("switch", "autoregressive", check=True)
    box.specd("switch", "ngram-simple", check=True)
    current = box.unit_path.read_text()
    killed = box.specd("rollback", env={"SPECD_FAULT": step})
    assert killed.returncode == -signal.SIGKILL
    box.specd("status", "--json", check=True)
    assert box.unit_path.read_text() == current
    assert alias_answers(box.port)
    box.specd("rollback", check=True)
    assert profile_of_unit(box.unit_path.read_text()) == "autoregressive"


@pytest.mark.parametrize("step", REVERT_STEPS)
def test_kill_during_revert_recovers(box, step: str) -> None:
    box.specd("switch", "autoregressive", check=True)
    old_text = box.unit_path.read_text()
    add_fake_profile(box, "broken", "exit-at-start")
    killed = box.specd("switch", "broken", env={"SPECD_FAULT": step})
    assert killed.returncode == -signal.SIGKILL
    box.specd("status", "--json", check=True)
    assert box.unit_path.read_text() == old_text
    assert alias_answers(box.port)
    assert intent_files(box) == []
