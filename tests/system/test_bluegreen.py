"""Blue-green switches for real: the private systemd --user, the real llama-server and tiny model,
the real CLI and daemon. kill -9 at every blue-green step and every step of its revert; the next
specd command leaves one healthy server, the one the slot pointer (so the proxy) names.

The tiny profiles run with `threads = 1` here, so two servers fit this 2-core box side by side.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from typing import Any

import httpx
import psutil
import pytest

from specd.deploy.plans import BLUE_GREEN_REVERT_STEPS, BLUE_GREEN_STEPS
from specd.deploy.slots import port_of
from specd.setup.sandbox import free_port
from specd.unit.render import profile_of_unit
from tests.conftest import Box, alias_answers
from tests.system.daemon_rig import real_stack
from tests.system.test_crash import intent_files, read_only_status, temp_files
from tests.system.test_daemon import Load, hang

pytestmark = [pytest.mark.systemd, pytest.mark.llama, pytest.mark.usefixtures("real_server")]
KILLED = -signal.SIGKILL


def two_fit(box: Box) -> int:
    """One thread per server, and a [proxy] with a known spare port; returns the spare port."""
    box.edit_profile("base", threads=1)
    spare = free_port()
    box.config_path.write_text(box.config_path.read_text() + f'\n[proxy]\nlisten = "127.0.0.1:{free_port()}"\n'
                               f"spare_port = {spare}\n")
    return spare


def show(box: Box, unit: str) -> dict[str, str]:
    shown = subprocess.run(["systemctl", "--user", "show", "-p", "MainPID,ActiveState,SubState", unit],
                           env=box.env, capture_output=True, text=True, check=True).stdout
    return dict(line.split("=", 1) for line in shown.splitlines() if "=" in line)


def pointer(box: Box) -> str:
    path = box.state.slot_pointer(box.unit)
    return str(json.loads(path.read_text())["slot"]) if path.exists() else "blue"


def green_path(box: Box):  # type: ignore[no-untyped-def]
    return box.manager.unit_dir / box.green_unit


def assert_blue_serves_alone(box: Box, old_text: str) -> None:
    """The box after recovery: blue runs the old unit and answers, green is stopped and gone."""
    assert pointer(box) == "blue"
    assert box.unit_path.read_text() == old_text
    assert show(box, box.unit)["ActiveState"] == "active"
    assert show(box, box.green_unit)["ActiveState"] in ("inactive", "failed")
    assert not green_path(box).exists()
    assert alias_answers(port_of(old_text))
    assert intent_files(box) == [] and temp_files(box) == []


@pytest.mark.parametrize("step", BLUE_GREEN_STEPS)
def test_kill_during_a_blue_green_switch_recovers(box: Box, step: str) -> None:
    spare = two_fit(box)
    box.specd("switch", "autoregressive", "--strategy", "restart", check=True)
    old_text, old_pid = box.unit_path.read_text(), show(box, box.unit)["MainPID"]

    killed = box.specd("switch", "ngram-simple", "--strategy", "blue-green", env={"SPECD_FAULT": step})
    assert killed.returncode == KILLED, killed.stderr

    status = read_only_status(box)
    if step == "preflight":
        assert "pending" not in status
        assert_blue_serves_alone(box, old_text)
    elif step == "commit":
        assert "pending" not in status and status["slot"] == "green" and status["healthy"]
        assert profile_of_unit(green_path(box).read_text()) == "ngram-simple" and alias_answers(spare)
        assert show(box, box.unit)["ActiveState"] == "inactive"
    else:
        assert f"'{step}'" in status["pending"]
        box.specd("recover", check=True)
        assert_blue_serves_alone(box, old_text)
        if step not in ("stop-old", "enable"):
            assert show(box, box.unit)["MainPID"] == old_pid  # the old server was never interrupted
        newest = json.loads(box.specd("history", "--json", check=True).stdout)[0]
        assert (newest["profile"], newest["outcome"], newest["slot"], newest["strategy"]) == \
            ("ngram-simple", "reverted", "green", "blue-green")
    again = box.specd("switch", "ngram-mod", "--strategy", "blue-green")
    assert again.returncode == 0, again.stderr
    assert json.loads(box.specd("status", "--json", check=True).stdout)["healthy"]


# A revert undoes what the switch did: started the new server (stopped again), moved the pointer
# (moved back), stopped the old one (started again). A kill after `gate` leaves the old server
# running; a kill after `stop-old` leaves it stopped, so recovery has to bring it back first.
REVERTS = {"revert-start-old": "stop-old", "revert-gate-old": "stop-old", "revert-flip": "flip",
           "revert-stop-new": "gate", "revert-write": "gate", "revert-reload": "gate"}
assert set(REVERTS) == set(BLUE_GREEN_REVERT_STEPS)


@pytest.mark.parametrize("revert_step", BLUE_GREEN_REVERT_STEPS)
def test_kill_during_a_blue_green_revert_is_finished_by_the_next_recovery(box: Box, revert_step: str) -> None:
    two_fit(box)
    box.specd("switch", "autoregressive", "--strategy", "restart", check=True)
    old_text = box.unit_path.read_text()
    killed = box.specd("switch", "ngram-simple", "--strategy", "blue-green", env={"SPECD_FAULT": REVERTS[revert_step]})
    assert killed.returncode == KILLED, killed.stderr

    interrupted = box.specd("recover", env={"SPECD_FAULT": revert_step})
    assert interrupted.returncode == KILLED, interrupted.stdout + interrupted.stderr
    assert intent_files(box) != []  # the revert was cut short: the intent is still there
    box.specd("recover", check=True)
    assert_blue_serves_alone(box, old_text)


def test_a_new_server_that_fails_its_gate_leaves_the_old_one_serving_untouched(box: Box) -> None:
    from tests.system.test_switch_failures import add_fake_profile

    two_fit(box)
    box.specd("switch", "autoregressive", "--strategy", "restart", check=True)
    old_text, old_pid = box.unit_path.read_text(), show(box, box.unit)["MainPID"]
    add_fake_profile(box, "broken", "exit-at-start")
    box.edit_profile("broken", threads=1)
    result = box.specd("switch", "broken", "--strategy", "blue-green")
    assert result.returncode == 1 and "exited while loading" in result.stderr
    assert "autoregressive kept serving in the blue slot" in result.stderr and "Traceback" not in result.stderr
    assert_blue_serves_alone(box, old_text)
    assert show(box, box.unit)["MainPID"] == old_pid


def test_status_and_history_show_the_slot_and_the_strategy(box: Box) -> None:
    spare = two_fit(box)
    box.specd("switch", "autoregressive", "--strategy", "restart", check=True)
    old_nice = os.getpriority(os.PRIO_PROCESS, int(show(box, box.unit)["MainPID"]))
    forced = box.specd("switch", "ngram-simple", "--strategy", "blue-green", check=True)
    assert "blue-green, green slot" in forced.stdout
    said = " ".join(forced.stdout.split())
    assert f"gated at nice {old_nice + 10} (the live server kept its CPU), then went back to nice {old_nice}" in said
    new_threads = psutil.Process(int(show(box, box.green_unit)["MainPID"])).threads()
    assert len(new_threads) > 1 and {os.getpriority(os.PRIO_PROCESS, t.id) for t in new_threads} == {old_nice}
    status = json.loads(box.specd("status", "--json", check=True).stdout)
    assert (status["slot"], status["slot_unit"], status["strategy"]) == ("green", box.green_unit, "blue-green")
    assert status["endpoint"] == f"http://127.0.0.1:{spare}" and status["active_profile"] == "ngram-simple"
    human = box.specd("status", check=True).stdout
    assert f"green ({box.green_unit}), by blue-green" in " ".join(human.split())
    # auto without the daemon's proxy running restarts in place, in the slot that serves, and says why
    auto = box.specd("switch", "ngram-mod", check=True)
    assert "restart, because the specd daemon's proxy is not running" in " ".join(auto.stdout.split())
    history = json.loads(box.specd("history", "--json", check=True).stdout)
    assert [(g["profile"], g["slot"], g["strategy"]) for g in history[:3]] == [
        ("ngram-mod", "green", "restart"), ("ngram-simple", "green", "blue-green"),
        ("autoregressive", "blue", "restart")]
    table = box.specd("history", env={"COLUMNS": "80"}, check=True).stdout  # a terminal's usual width
    header = table.splitlines()[0].split()
    assert header[:6] == ["gen", "time", "(UTC)", "kind", "profile", "slot"] and "strategy" in header, table
    assert "blue-green" in table.split() and "green" in table.split(), table
    assert box.specd("rollback", check=True).returncode == 0  # in place, in the green slot
    assert profile_of_unit(green_path(box).read_text()) == "ngram-simple" and pointer(box) == "green"


@real_stack
def test_blue_green_under_streaming_load_fails_no_request_and_the_daemon_follows(box: Box,
                                                                                start_daemon: Any) -> None:
    box.edit_profile("base", threads=1)
    spare = free_port()
    box.specd("switch", "autoregressive", "--strategy", "restart", check=True)
    daemon = start_daemon(grace_s=0, proxy=f"spare_port = {spare}\n")
    with Load(daemon.proxy_url, clients=4) as load:
        daemon.wait_for("some traffic", lambda: load.sent >= 3)
        for profile in ("ngram-simple", "ngram-mod"):
            switched = box.specd("switch", profile, check=True)  # auto: the daemon's proxy runs, both fit
            assert "strategy: blue-green" in " ".join(switched.stdout.split()), switched.stdout
            before = load.sent
            daemon.wait_for(f"requests after {profile}", lambda before=before: load.sent >= before + 3)
    assert load.failures == [], f"{len(load.failures)} of {load.sent} failed:\n" + "\n".join(load.failures[:10])
    assert pointer(box) == "blue" and profile_of_unit(box.unit_path.read_text()) == "ngram-mod"

    box.specd("switch", "ngram-simple", check=True)  # into the green slot again
    assert daemon.wait_for("the proxy on the green slot",
                           lambda: daemon.status()["units"][box.unit]["proxy"]["backend"].endswith(f":{spare}"))
    green_pid = daemon.main_pid(box.green_unit)
    hang(green_pid)  # the monitor watches the slot that serves: it restarts green, not blue
    daemon.wait_for("green to run again", lambda: daemon.main_pid(box.green_unit) not in (0, green_pid), timeout_s=90)
    daemon.wait_for("a restart event", lambda: [e for e in box.history().events(box.unit)
                                                if e["kind"] == "daemon-restart"])
    assert show(box, box.unit)["ActiveState"] == "inactive"
    response = httpx.post(f"{daemon.proxy_url}/v1/completions", timeout=60,
                          json={"model": "tiny", "prompt": "def add(a, b):", "max_tokens": 8, "temperature": 0})
    assert response.status_code == 200


@real_stack
def test_after_the_flip_the_new_server_has_the_clients_prompts_cached(box: Box, start_daemon: Any) -> None:
    box.edit_profile("base", threads=1)
    spare = free_port()
    box.specd("switch", "autoregressive", "--strategy", "restart", check=True)
    daemon = start_daemon(grace_s=0, proxy=f"spare_port = {spare}\n")
    prompt = "import json\n\n\ndef load_settings(path):\n    \"\"\"Read the settings file at path.\"\"\"\n"

    def ask() -> dict[str, Any]:
        response = httpx.post(f"{daemon.proxy_url}/v1/completions", timeout=60,
                              json={"model": "tiny", "prompt": prompt, "max_tokens": 4, "temperature": 0})
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        return answer

    cold = ask()["timings"]
    assert cold["prompt_n"] > 10 and cold["cache_n"] <= 1  # a fresh server (the gate's BOS at most): all processed
    warm = ask()["timings"]  # the same prompt again, on the server that has it cached
    assert warm["cache_n"] > cold["prompt_n"] / 2, (cold, warm)
    switched = box.specd("switch", "ngram-simple", "--strategy", "blue-green", check=True)
    assert "strategy: blue-green" in " ".join(switched.stdout.split())
    assert daemon.live_status(box.unit)["proxy"]["backend"].endswith(f":{spare}")
    after = ask()["timings"]  # the first request the new server gets from a client
    assert after["cache_n"] >= warm["cache_n"] and after["prompt_n"] <= warm["prompt_n"], (cold, warm, after)
    assert "warmed the new server's prompt cache with 1 of 1 recent prompt(s)" in daemon.log()


@real_stack
def test_auto_restarts_when_two_servers_would_share_the_cores_and_says_why(box: Box, start_daemon: Any) -> None:
    cores = len(os.sched_getaffinity(0))
    box.edit_profile("base", threads=cores)
    box.specd("switch", "autoregressive", "--strategy", "restart", check=True)
    start_daemon()
    started = time.monotonic()
    result = box.specd("switch", "ngram-simple", check=True)
    assert f"{cores} + {cores} threads on {cores} cores" in " ".join(result.stdout.split())
    assert "restart, because the new server does not fit beside the old one" in " ".join(result.stdout.split())
    assert pointer(box) == "blue" and time.monotonic() - started < 120


@pytest.mark.parametrize("step", ("write", "restart", "gate"))
def test_kill_during_a_restart_in_the_green_slot_recovers_there(box: Box, step: str) -> None:
    two_fit(box)
    box.specd("switch", "autoregressive", "--strategy", "restart", check=True)
    box.specd("switch", "ngram-simple", "--strategy", "blue-green", check=True)
    green_text = green_path(box).read_text()
    killed = box.specd("switch", "ngram-mod", "--strategy", "restart", env={"SPECD_FAULT": step})
    assert killed.returncode == KILLED, killed.stderr
    box.specd("recover", check=True)
    assert pointer(box) == "green" and green_path(box).read_text() == green_text
    assert show(box, box.green_unit)["ActiveState"] == "active" and show(box, box.unit)["ActiveState"] == "inactive"
    assert alias_answers(port_of(green_text)) and intent_files(box) == []
