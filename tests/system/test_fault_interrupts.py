"""Ctrl-C (and SIGTERM) at every step of a switch, with the real daemon's proxy in front of the real
llama-server and clients sending requests all along (issue 21: an interrupted switch used to leave
every client held for three minutes).

`SPECD_FAULT=<step>:INT` makes the CLI send itself SIGINT at that step (`:TERM` SIGTERM): a real
signal, handled as one from a terminal would be, at an exact point instead of a lucky moment.
The step inside the drain is `tests/system/test_drain_interrupt.py`'s (a stream keeps it waiting).

What the owner relies on, at every step: no client request is lost (each gets its answer; the ones
held while a revert restarts the old server are served after it), the traffic log counts exactly
what the clients sent, the proxy is not left paused and answers within 1 s of the CLI's exit, the
unit, `specd status` and history agree (reverted, or ok when the interrupt came after the commit),
and before the restart the old server is never restarted.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import httpx
import pytest

from specd.unit.render import profile_of_unit
from tests.conftest import Box
from tests.system.daemon_rig import RunningDaemon, real_stack
from tests.system.fault_load import Load
from tests.system.fault_results import FaultRecorder

SERVING_BOUND_S = 1.0
BEFORE_RESTART = ("preflight", "intent", "backup", "write", "reload")
STEPS = (*BEFORE_RESTART, "restart", "gate", "commit")  # commit last: the switch stands after it


WAIT_S = 120.0  # how long to wait at all; SERVING_BOUND_S is checked on the value returned


def serving_after(daemon: RunningDaemon, unit: str) -> float:
    """Seconds until the proxy is not paused and answers through its gate (GET /v1/models)."""
    started = time.monotonic()
    with httpx.Client(timeout=WAIT_S) as client:
        while daemon.proxy_state(unit)["paused"]:
            assert time.monotonic() - started < WAIT_S, f"still paused after {WAIT_S} s\n{daemon.log()}"
            time.sleep(0.02)
        assert client.get(f"{daemon.proxy_url}/v1/models").status_code == 200
    return time.monotonic() - started


def traffic(box: Box) -> dict[str, Any]:
    summary: dict[str, Any] = json.loads(box.specd("traffic", "--json", "--since", "1h", check=True).stdout)
    return summary


def interrupt_at(box: Box, daemon: RunningDaemon, step: str, signal_name: str, recorded: int,
                 fault_results: FaultRecorder) -> int:
    """Switch to ngram-simple, interrupted at `step`, under load; check it all; return requests recorded."""
    old_pid = daemon.main_pid(box.unit)
    generations_before = json.loads(box.specd("history", "--json", check=True).stdout)
    with Load(daemon.proxy_url, 2) as load:
        daemon.wait_for("the clients to be served", lambda: load.served() >= 2)
        cli = subprocess.run([sys.executable, "-m", "specd", "switch", "ngram-simple"], capture_output=True,
                             text=True, timeout=300, env={**box.env, "SPECD_FAULT": f"{step}:{signal_name}"},
                             check=False)
        serving_s = serving_after(daemon, box.unit)
        later = len(load.answered())
        daemon.wait_for("requests sent after the interrupt to be served", lambda: load.served() >= later + 2)
    sent = load.answered()
    where = f"SIG{signal_name} at {step}: "

    if step in ("preflight", "commit"):  # outside the transaction: the shell's exit status for an interrupt
        assert cli.returncode == 130, where + cli.stdout + cli.stderr
    else:  # the switch failed and says why
        assert cli.returncode == 1 and "interrupted (Ctrl-C or SIGTERM)" in cli.stderr, where + cli.stderr
    assert "Traceback" not in cli.stderr, where + cli.stderr
    assert serving_s < SERVING_BOUND_S, where
    assert [s.status for s in sent] == [200] * len(sent), (where, [s for s in sent if s.status != 200])
    daemon.wait_for(f"{where}the traffic log to count every request",
                    lambda: traffic(box)["requests"] == recorded + len(sent), 30)
    assert traffic(box)["failed"] == 0, where

    status = box.specd("status", "--json")
    assert status.returncode == 0, where + status.stdout + status.stderr  # no interrupted switch pending
    history = json.loads(box.specd("history", "--json", check=True).stdout)
    installed = profile_of_unit(box.unit_path.read_text())
    assert json.loads(status.stdout)["active_profile"] == installed, where
    if step == "preflight":  # nothing was recorded or touched yet
        assert history == generations_before and installed == "autoregressive", where
        outcome = "nothing recorded"
    elif step == "commit":  # interrupted after the switch committed: it stands
        assert (history[0]["profile"], history[0]["outcome"], installed) == ("ngram-simple", "ok", "ngram-simple")
        outcome = "ok (committed before the signal)"
    else:
        assert (history[0]["profile"], history[0]["outcome"], installed) == (
            "ngram-simple", "reverted", "autoregressive"), (where, history[0])
        outcome = "reverted"
    if step in BEFORE_RESTART:
        assert daemon.main_pid(box.unit) == old_pid, where  # the old server kept running throughout
    held_s = max(s.answered_at - s.sent_at for s in sent)
    fault_results.record(
        f"SIG{signal_name} to `specd switch` at step {step} (2 clients busy)",
        bound=f"0 requests lost; proxy serving within {SERVING_BOUND_S:g} s of the CLI's exit; history true",
        measured=(f"{len(sent)} requests, 0 lost; serving {serving_s:.2f} s after the CLI exited; longest "
                  f"request {held_s:.1f} s; history: {outcome}"))
    return recorded + len(sent)


@real_stack
@pytest.mark.timeout(1800)  # eight interrupted switches, each reverted under load, on one daemon
@pytest.mark.own_threads
def test_ctrl_c_at_every_step_of_a_switch_loses_no_request_and_leaves_the_proxy_serving(
        box: Box, start_daemon: Any, fault_results: FaultRecorder) -> None:
    daemon = start_daemon()
    box.specd("switch", "autoregressive", check=True)
    recorded = 0
    for step in STEPS:
        recorded = interrupt_at(box, daemon, step, "INT", recorded, fault_results)


@real_stack
@pytest.mark.own_threads
def test_sigterm_to_a_switch_before_and_after_its_restart_reverts_and_leaves_the_proxy_serving(
        box: Box, start_daemon: Any, fault_results: FaultRecorder) -> None:
    daemon = start_daemon()
    box.specd("switch", "autoregressive", check=True)
    recorded = 0
    for step in ("write", "restart"):
        recorded = interrupt_at(box, daemon, step, "TERM", recorded, fault_results)
