"""Notifications from the real daemon (a Type=notify user unit on the private systemd, the real
llama-server and tiny model, the performance emulator for the tuner's switch) through the real
apprise library to a local HTTP receiver: every kind arrives, says what happened, on which box
and how to undo it; and a notifier that hangs or fails never holds up a switch."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import pytest

from specd.daemon.notifications import NOTICE_KINDS
from specd.tune.workloads import save_workload
from specd.unit.render import profile_of_unit
from tests.conftest import TINY_MODEL, Box
from tests.receivers import receiver
from tests.system.daemon_rig import RunningDaemon, real_stack
from tests.system.test_bench import CODE_ASK, emulated_profiles, shaped
from tests.system.test_daemon import hang


def truncated_model(box: Box) -> Path:
    """The tiny model cut in half: preflight reads its header fine, llama-server fails to load it."""
    path = box.root / "truncated.gguf"
    with TINY_MODEL.open("rb") as source, path.open("wb") as target:
        target.write(source.read(TINY_MODEL.stat().st_size // 2))
    return path


def add_broken_profile(box: Box) -> None:
    box.write_profile("broken-model", f'inherits = "autoregressive"\nmodel = "{truncated_model(box)}"\n'
                                      "health_timeout_s = 30\n")


def of_kind(kind: str) -> Any:
    return lambda received: [m for m in received if f"event: {kind}" in m["message"]]


def notify_table(*urls: str, timeout_s: float = 10) -> str:
    """Health lost after 1.2 s: the hang below lasts two failed 1 s checks plus the monitor's rollback,
    which on a fast box is back in about 2 s more; the observer reads the monitor once a second, so the
    threshold must sit well inside that outage (3 s did not, once in CI)."""
    listed = ", ".join(f'"{url}"' for url in urls)
    return f"[notify]\nurls = [{listed}]\nmin_interval_s = 0\nhealth_lost_minutes = 0.02\ntimeout_s = {timeout_s}\n"


def healthy(box: Box) -> bool:
    return box.specd("status", "--json").returncode == 0


def check_message(message: dict[str, Any], box: Box, undo: str) -> None:
    assert message["title"].startswith(f"specd on {socket.gethostname()}: "), message
    assert f"box: {socket.gethostname()}" in message["message"] and f"unit: {box.unit}" in message["message"]
    assert f"undo: {undo}" in message["message"], message["message"]


@real_stack
@pytest.mark.own_threads
def test_every_kind_of_notification_reaches_a_local_receiver(box: Box, start_daemon: Any) -> None:
    box.specd("switch", "autoregressive", check=True)
    box.specd("switch", "ngram-simple", check=True)
    add_broken_profile(box)
    tuner = (f'enabled = true\ncron = "* * * * *"\nidle_minutes = 0\n'
             f'workload = "{box.root / "no-such-workload.jsonl"}"\n')  # every minute, and it fails
    with receiver() as inbox:
        daemon: RunningDaemon = start_daemon(grace_s=600, tuner=tuner, extra=notify_table(f"json://{inbox.url}/specd"))

        hang(daemon.main_pid(box.unit))  # right after a switch: the monitor rolls it back
        lost = inbox.wait_for("health lost", of_kind("health-lost"))[0]
        check_message(lost, box, "specd status")
        rolled = inbox.wait_for("the monitor's rollback", of_kind("monitor-rollback"))[0]
        assert "rolled back to autoregressive" in rolled["message"]
        check_message(rolled, box, "specd switch ngram-simple")
        daemon.wait_for("a healthy endpoint", lambda: healthy(box))

        hang(daemon.main_pid(box.unit))  # the newest generation is the daemon's own rollback: restart
        restarted = inbox.wait_for("the monitor's restart", of_kind("monitor-restart"))[0]
        assert "restarted autoregressive" in restarted["message"]
        check_message(restarted, box, "nothing to undo")
        daemon.wait_for("a healthy endpoint", lambda: healthy(box))

        failed = box.specd("switch", "broken-model")
        assert failed.returncode == 1 and "reverted to autoregressive" in failed.stderr
        reverted = inbox.wait_for("the auto-revert", of_kind("auto-revert"))[0]
        assert "switch to broken-model reverted" in reverted["title"] and "--- journal ---" in reverted["message"]
        check_message(reverted, box, "nothing to undo: the box is back on autoregressive")

        bench = inbox.wait_for("the failed nightly bench", of_kind("bench-failed"), timeout_s=150)[0]
        assert "no-such-workload" in bench["message"]
        check_message(bench, box, "nothing to undo")

        emulated_profiles(box, ("plain", "mtp"))
        box.specd("switch", "plain", check=True)
        workload = box.root / "code.jsonl"
        save_workload(shaped(CODE_ASK, 500, 256), workload)
        tuned = box.specd("tune", "--workload", str(workload), "--n", "6", "--profile", "plain", "--profile", "mtp",
                          check=True, timeout=600)
        assert profile_of_unit(box.unit_path.read_text()) == "mtp", tuned.stdout
        switched = inbox.wait_for("the tuner's switch", of_kind("tuner-switch"))[0]
        assert "the tuner switched to mtp" in switched["title"]
        check_message(switched, box, "specd switch plain && specd pin plain")

        kinds = {line.removeprefix("event: ") for m in inbox.received for line in m["message"].splitlines()
                 if line.startswith("event: ")}
        assert kinds == set(NOTICE_KINDS), kinds


@real_stack
@pytest.mark.own_threads
def test_a_hanging_or_failing_notifier_never_holds_up_a_switch(box: Box, start_daemon: Any) -> None:
    box.specd("switch", "autoregressive", check=True)
    add_broken_profile(box)
    with receiver("hang") as hung, receiver("fail") as failing:
        daemon = start_daemon(extra=notify_table(f"json://{hung.url}/", f"json://{failing.url}/", timeout_s=60))
        failed = box.specd("switch", "broken-model")  # an auto-revert: the daemon notifies both
        assert failed.returncode == 1
        daemon.wait_for("the notifier to reach the hung service", lambda: hung.connections >= 1)
        started = time.monotonic()
        box.specd("switch", "ngram-simple", check=True)  # drains through the daemon while the send hangs
        took_s = time.monotonic() - started
        assert profile_of_unit(box.unit_path.read_text()) == "ngram-simple"
        assert took_s < 60, f"the switch took {took_s:.0f} s while the notifier hung"
        assert time.time() - daemon.status()["heartbeat_at"] < 15  # the daemon's loop kept beating
        daemon.wait_for("the failing service to be tried too", lambda: failing.connections >= 1, timeout_s=120)
