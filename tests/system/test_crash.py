"""kill -9 of specd at every named step of switch, rollback and revert: the next specd command
leaves the box finished or reverted, never half, with the unit file whole."""

from __future__ import annotations

import json
import signal
import subprocess

import pytest

from specd.deploy.switch import REVERT_STEPS, STEPS
from specd.unit.render import profile_of_unit
from tests.conftest import alias_answers
from tests.system.test_switch_failures import add_fake_profile

pytestmark = [pytest.mark.systemd, pytest.mark.llama, pytest.mark.usefixtures("real_server")]


def intent_files(box) -> list[str]:
    return [p.name for p in (box.root / "state" / "specd" / "intents").glob("*.json")]


def temp_files(box) -> list[str]:
    """Every specd temp file beside the unit: its own and its backups' (`.<unit>.pre-....specd-tmp-*`)."""
    return [p.name for p in box.unit_path.parent.glob(".*specd-tmp-*")]


def service_state(box) -> dict[str, str]:
    shown = subprocess.run(["systemctl", "--user", "show", "-p", "MainPID,SubState,NRestarts", box.unit],
                           env=box.env, capture_output=True, text=True, check=True).stdout
    return dict(line.split("=", 1) for line in shown.splitlines() if "=" in line)



def read_only_status(box) -> dict:
    """`specd status` after a kill: reports, exits 3 while an intent is pending, changes nothing.

    A unit caught in systemd's own `auto-restart` (Restart=on-failure after a profile that exits)
    is started again by systemd, which counts it in NRestarts; a start by specd would not be."""
    before = service_state(box)
    text_before = box.unit_path.read_text()
    result = box.specd("status", "--json")
    assert result.returncode in (0, 3), result.stderr
    after = service_state(box)
    if before["SubState"] == "auto-restart" and after["MainPID"] != before["MainPID"]:
        assert int(after["NRestarts"]) > int(before["NRestarts"]), (before, after)
    else:
        assert after["MainPID"] == before["MainPID"], (before, after)
    assert box.unit_path.read_text() == text_before
    return json.loads(result.stdout)


@pytest.mark.parametrize("step", STEPS)
def test_kill_during_switch_recovers(box, step: str) -> None:
    box.specd("switch", "autoregressive", check=True)
    old_text = box.unit_path.read_text()

    killed = box.specd("switch", "ngram-simple", env={"SPECD_FAULT": step})
    assert killed.returncode == -signal.SIGKILL

    status = read_only_status(box)
    if step in ("preflight", "commit"):
        assert "pending" not in status and intent_files(box) == []
        expected = "autoregressive" if step == "preflight" else "ngram-simple"
        assert profile_of_unit(box.unit_path.read_text()) == expected
    else:
        assert "pending" in status and f"'{step}'" in status["pending"]
        box.specd("recover", check=True)
        assert intent_files(box) == []
        assert box.unit_path.read_text() == old_text, f"killed at {step}: the unit is not the old one"
        history = json.loads(box.specd("history", "--json", check=True).stdout)
        assert history[0]["profile"] == "ngram-simple" and history[0]["outcome"] == "reverted"
    assert temp_files(box) == []
    status = json.loads(box.specd("status", "--json", check=True).stdout)
    assert status["healthy"] and alias_answers(box.port)
    again = box.specd("switch", "ngram-simple")
    assert again.returncode == 0, again.stderr


@pytest.mark.parametrize("step", ("intent", "backup", "write", "reload", "restart", "gate"))
def test_kill_during_rollback_recovers(box, step: str) -> None:
    box.specd("switch", "autoregressive", check=True)
    box.specd("switch", "ngram-simple", check=True)
    current = box.unit_path.read_text()
    killed = box.specd("rollback", env={"SPECD_FAULT": step})
    assert killed.returncode == -signal.SIGKILL
    assert "pending" in read_only_status(box)
    box.specd("recover", check=True)
    assert intent_files(box) == [] and temp_files(box) == []
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
    read_only_status(box)
    box.specd("recover", check=True)
    assert box.unit_path.read_text() == old_text
    assert alias_answers(box.port)
    assert intent_files(box) == []
