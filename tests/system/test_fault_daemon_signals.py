"""The daemon itself killed or stopped while a switch drains its proxy (issue 21's list).

Real daemon as a systemd unit, its proxy in front of the real llama-server, a long stream in
flight so that `specd switch` waits in the drain, and two clients sending requests all along.

- `kill -9` of the daemon: the proxy dies with it (its clients see refused connections, never a
  hold); systemd restarts it as units/specd.service says (`Restart=on-failure`, `RestartSec=`),
  and the new daemon starts clean: no pause carried over, serving, no error in its log. The switch
  goes on without the drain and completes; history and the unit agree.
- SIGTERM to the daemon (`systemctl stop`, a reboot): its shutdown lets every held request go at
  once, so no client waits on a pause past the drain lease; the switch completes or reverts,
  history and the unit agree, and the next start is clean.
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

import httpx
import pytest

from specd.daemon.app import SHUTDOWN_GRACE_S
from specd.daemon.control import DRAIN_LEASE_S
from specd.unit.render import profile_of_unit
from tests.conftest import Box
from tests.system.daemon_rig import (
    RunningDaemon,
    real_stack,
    shipped_restart_policy,
    switch_waiting_on_a_stream,
)
from tests.system.fault_load import Load, Sent
from tests.system.fault_results import FaultRecorder

RESTART_SEC = float(next(line.split("=")[1] for line in shipped_restart_policy().splitlines()
                         if line.startswith("RestartSec=")))
BACK_BOUND_S = RESTART_SEC + 15.0  # systemd's RestartSec, then the daemon's start on a busy 2-core box


def daemon_pid(daemon: RunningDaemon) -> int:
    return daemon.main_pid(daemon.unit)


def serves(daemon: RunningDaemon) -> bool:
    try:
        return httpx.get(f"{daemon.proxy_url}/v1/models", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def history_agrees_with_the_unit(box: Box) -> dict[str, Any]:
    status = box.specd("status", "--json")
    assert status.returncode == 0, status.stdout + status.stderr  # nothing left pending
    newest: dict[str, Any] = json.loads(box.specd("history", "--json", check=True).stdout)[0]
    installed = profile_of_unit(box.unit_path.read_text())
    assert json.loads(status.stdout)["active_profile"] == installed
    if newest["outcome"] == "ok":
        assert newest["profile"] == installed == "ngram-simple", newest
    else:
        assert (newest["outcome"], installed) == ("reverted", "autoregressive"), newest
    return newest


def clean_start(daemon: RunningDaemon, box: Box) -> None:
    state = daemon.proxy_state(box.unit)
    assert not state["paused"] and state["active"] == 0, state
    log = daemon.log()
    assert "Traceback" not in log and "ERROR" not in log, log


@real_stack
@pytest.mark.own_threads
def test_the_daemon_killed_mid_drain_is_restarted_clean_and_the_switch_completes(
        box: Box, start_daemon: Any, fault_results: FaultRecorder) -> None:
    daemon = start_daemon(restart_as_shipped=True)
    box.specd("switch", "autoregressive", check=True)
    with Load(daemon.proxy_url, 2, pause_s=0.2) as load:
        cli, reader = switch_waiting_on_a_stream(box, daemon)
        old_daemon = daemon_pid(daemon)
        os.kill(old_daemon, signal.SIGKILL)
        killed = time.monotonic()
        daemon.wait_for("systemd to restart the daemon",
                        lambda: daemon_pid(daemon) not in (0, old_daemon) and serves(daemon), BACK_BOUND_S + 30)
        back_s = time.monotonic() - killed
        out, err = cli.communicate(timeout=300)
        served_by_then = load.served()
        daemon.wait_for(f"requests after the restart to be served (so far: {load.answered()[-6:]})",
                        lambda: load.served() >= served_by_then + 4)
    reader.join(200)
    sent = load.answered()

    assert cli.returncode == 0, out + err  # the drain call failed with the daemon; the switch went on
    newest = history_agrees_with_the_unit(box)
    assert back_s < BACK_BOUND_S
    clean_start(daemon, box)
    # While no daemon ran, clients were refused (status 0), never held; after, all were served.
    after = [s for s in sent if s.sent_at > killed + back_s]
    assert after and all(s.status == 200 for s in after), [s for s in after if s.status != 200]
    assert all(s.status in (0, 200) for s in sent), [s for s in sent if s.status not in (0, 200)]
    refused = sum(s.status == 0 for s in sent)
    fault_results.record(
        "`kill -9` of the daemon while a switch drains (a stream and 2 clients in flight)",
        bound=f"daemon back and serving within RestartSec {RESTART_SEC:g} s + 15 s; clean start; switch completes",
        measured=(f"serving again {back_s:.1f} s after the kill; {refused} requests refused meanwhile, "
                  f"{len(after)} after, 0 failed; switch outcome {newest['outcome']}"))


def waits_after(sent: list[Sent], moment: float) -> list[float]:
    """How long each request still unanswered at `moment` went on waiting after it."""
    return [s.answered_at - moment for s in sent if s.sent_at <= moment < s.answered_at]


@real_stack
@pytest.mark.own_threads
def test_sigterm_to_the_daemon_mid_switch_holds_no_client_past_the_lease_and_restarts_clean(
        box: Box, start_daemon: Any, fault_results: FaultRecorder) -> None:
    daemon = start_daemon()
    box.specd("switch", "autoregressive", check=True)
    with Load(daemon.proxy_url, 2, pause_s=0.2) as load:
        daemon.wait_for("the clients to be served", lambda: load.served() >= 2)
        cli, reader = switch_waiting_on_a_stream(box, daemon)
        paused_at = time.monotonic()
        with Load(daemon.proxy_url, 1) as late:  # arrives during the pause: held at the gate
            daemon.wait_for("a request held by the pause", lambda: late.answered() == [] and
                            daemon.proxy_state(box.unit)["in_flight"] > daemon.proxy_state(box.unit)["active"])
            pid = daemon_pid(daemon)
            stopped = time.monotonic()  # before the signal: the daemon may answer before this thread runs again
            os.kill(pid, signal.SIGTERM)
            daemon.wait_for("the daemon to exit", lambda: daemon_pid(daemon) == 0, 60)
            exited_s = time.monotonic() - stopped
        out, err = cli.communicate(timeout=300)
    reader.join(200)
    sent, held = load.answered(), late.answered()

    # Held by the pause when the SIGTERM came: let go at once, with a 503 (the backend is about to restart).
    held_waits = waits_after(held, stopped)
    assert held_waits and max(held_waits) < DRAIN_LEASE_S, held
    assert held[0].status == 503, held
    # Waiting on llama-server (queued behind the stream): the shutdown's grace period, then a clean answer.
    in_flight = [s for s in sent if s.sent_at <= paused_at < s.answered_at]
    assert max(waits_after(sent, stopped), default=0.0) < SHUTDOWN_GRACE_S + 5
    assert all(s.status in (0, 200, 503) for s in sent + held), [s for s in sent if s.status not in (0, 200, 503)]
    state = dict(line.split("=", 1) for line in daemon.systemctl("show", "-p", "ActiveState,Result",
                                                                  daemon.unit).stdout.split())
    assert state == {"ActiveState": "inactive", "Result": "success"}, state  # not killed at TimeoutStopSec
    shutdown_log = daemon.log().split("specd daemon stopping")[-1]
    assert "Traceback" not in shutdown_log and "ERROR" not in shutdown_log, shutdown_log
    assert cli.returncode in (0, 1), out + err  # completed, or reverted and said why
    newest = history_agrees_with_the_unit(box)

    started = daemon.systemctl("start", daemon.unit)
    assert started.returncode == 0, started.stderr
    assert serves(daemon)
    clean_start(daemon, box)
    fault_results.record(
        "SIGTERM to the daemon while a switch drains (a stream and 2 clients in flight, 1 held)",
        bound=(f"held requests answered within the drain lease ({DRAIN_LEASE_S:g} s); in-flight ones within the "
               f"shutdown grace ({SHUTDOWN_GRACE_S:g} s) + 5 s, never a 500; clean exit; switch completes or reverts"),
        measured=(f"held request answered {held[0].status} after {max(held_waits):.2f} s; {len(in_flight)} in "
                  f"flight answered within {max(waits_after(sent, stopped), default=0.0):.1f} s; daemon exited "
                  f"after {exited_s:.1f} s (result success); switch outcome {newest['outcome']}; restart clean"))
