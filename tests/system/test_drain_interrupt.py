"""A switch interrupted while it drains the daemon's proxy: every pause ends, quickly.

The real daemon (its proxy in front of the real llama-server), a long stream in flight so that
`specd switch` has to wait for it, then the switch is interrupted: Ctrl-C must leave the proxy
serving within a second, the old server untouched (it was never restarted) and the unit back on
the old profile; a `kill -9` of the CLI, which can resume nothing, ends the pause when its lease
runs out (control.DRAIN_LEASE_S) instead of after the drain and hold timeouts.
"""

from __future__ import annotations

import json
import signal
import time
from typing import Any

import httpx
import pytest

from specd.unit.render import profile_of_unit
from tests.conftest import Box
from tests.system.daemon_rig import RunningDaemon, real_stack, switch_waiting_on_a_stream
from tests.system.fault_results import FaultRecorder

WAIT_S = 120.0  # how long to wait for the proxy to resume at all; the bound each test checks is its own


def _seconds_until_served(daemon: RunningDaemon, unit: str) -> float:
    """Seconds until the proxy is no longer paused (polled; fails only past the generous WAIT_S, so
    the caller's assertion on the value is what checks the bound)."""
    started = time.monotonic()
    while daemon.proxy_state(unit)["paused"]:
        assert time.monotonic() - started < WAIT_S, f"the proxy is still paused after {WAIT_S} s\n{daemon.log()}"
        time.sleep(0.05)
    return time.monotonic() - started


@real_stack
@pytest.mark.own_threads
def test_ctrl_c_while_a_switch_drains_resumes_the_proxy_within_a_second(box: Box, start_daemon: Any,
                                                                        fault_results: FaultRecorder) -> None:
    daemon = start_daemon()
    box.specd("switch", "autoregressive", check=True)
    old_pid = daemon.main_pid(box.unit)
    cli, _stream = switch_waiting_on_a_stream(box, daemon)
    try:
        cli.send_signal(signal.SIGINT)
        waited = _seconds_until_served(daemon, box.unit)
        out, err = cli.communicate(timeout=60)
    finally:  # a failed check must not leave the CLI running into the next test
        if cli.poll() is None:
            cli.kill()
            cli.communicate()
    assert cli.returncode != 0 and "interrupt" in (out + err).lower(), out + err
    assert "waiting for 1 in-flight request" in err, err
    # through the gate to the backend (a completion would queue behind the stream on the one slot)
    assert httpx.get(f"{daemon.proxy_url}/v1/models", timeout=30).status_code == 200
    assert daemon.main_pid(box.unit) == old_pid  # the old server was never restarted
    assert profile_of_unit(box.unit_path.read_text()) == "autoregressive"
    history = json.loads(box.specd("history", "--json", check=True).stdout)
    assert history[0]["outcome"] == "reverted", history[0]
    assert waited < 1.0
    fault_results.record(
        "Ctrl-C to `specd switch` while it drains (a stream in flight)",
        bound="proxy serving within 1 s; old server never restarted; history says reverted",
        measured=f"serving {waited:.2f} s after the Ctrl-C; same MainPID; reverted")


@real_stack
@pytest.mark.own_threads
def test_a_killed_switch_cannot_hold_the_proxy_longer_than_its_lease(box: Box, start_daemon: Any,
                                                                     fault_results: FaultRecorder) -> None:
    from specd.daemon.control import DRAIN_LEASE_S

    daemon = start_daemon()
    box.specd("switch", "autoregressive", check=True)
    cli, _stream = switch_waiting_on_a_stream(box, daemon)
    killed = time.monotonic()
    cli.kill()
    cli.communicate(timeout=10)  # reaps it and closes its pipes
    _seconds_until_served(daemon, box.unit)
    resumed_s = time.monotonic() - killed
    assert resumed_s < DRAIN_LEASE_S + 2.0
    assert httpx.get(f"{daemon.proxy_url}/v1/models", timeout=30).status_code == 200
    # The CLI died mid-switch: status says so and changes nothing; recover reverts.
    status = box.specd("status")
    assert status.returncode == 3 and "specd recover" in status.stdout
    recovered = box.specd("recover")
    assert recovered.returncode == 0, recovered.stderr
    assert profile_of_unit(box.unit_path.read_text()) == "autoregressive"
    # The daemon's watcher saw the half-done switch's unit file; it must not have taken it for a hand edit.
    history = json.loads(box.specd("history", "--json", check=True).stdout)
    assert [g["kind"] for g in history if g["kind"] == "external-edit"] == [], history
    assert (history[0]["profile"], history[0]["outcome"]) == ("ngram-simple", "reverted"), history[0]
    fault_results.record(
        "`kill -9` of `specd switch` while it drains",
        bound=f"proxy serving within the drain lease ({DRAIN_LEASE_S:g} s) + 2 s; status reports it; recover "
              "reverts; the watcher records no hand edit",
        measured=f"serving {resumed_s:.1f} s after the kill; status exit 3; recovered to autoregressive; "
                 "0 external-edit generations")
