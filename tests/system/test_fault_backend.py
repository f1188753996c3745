"""Backend faults and a crowd, through the real daemon's proxy (issue 21's list): 300 clients at
once, a backend answering 500, a backend answering invalid JSON.

The unit runs the FAKE server (`tests/fakes/fake_llama_server.py`): the real llama-server answers
500 or cut JSON only by accident, and with its one slot 300 completions would measure the tiny
model, not the proxy. The FAKE logs the sha256 of every body it receives, so each request's
deliveries are counted exactly. The same cases against an in-process proxy are in
`tests/unit/test_proxy_faults.py`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Box
from tests.fakes.fake_llama_server import ANSWER_500_MARKER, GARBAGE, GARBAGE_MARKER
from tests.system.daemon_rig import RunningDaemon, real_stack
from tests.system.fault_load import completion_body
from tests.system.fault_results import FaultRecorder
from tests.system.test_switch_failures import fake_binary

CLIENTS = 300
CROWD_BOUND_S = 60.0


def fake_deployment(box: Box, start_daemon: Any) -> tuple[RunningDaemon, Path]:
    daemon = start_daemon()
    fake_log = box.root / "fake-server.log"
    box.write_profile("fake-ok", f'inherits = "base"\nbinary = "{fake_binary(box.root)}"\nstability_s = 1\n'
                                 f'args = ["--fake-log", "{fake_log}"]\n')
    box.specd("switch", "fake-ok", check=True)
    return daemon, fake_log


def deliveries(fake_log: Path) -> list[str]:
    return [line.split()[1] for line in fake_log.read_text().splitlines() if line.startswith("request ")]


def traffic_statuses(box: Box) -> dict[str, int]:
    summary: dict[str, Any] = json.loads(box.specd("traffic", "--json", "--since", "1h", check=True).stdout)
    return {"requests": int(summary["requests"]), "failed": int(summary["failed"])}


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@real_stack
@pytest.mark.own_threads
def test_300_clients_at_once_each_get_one_answer_and_reach_the_server_once(
        box: Box, start_daemon: Any, fault_results: FaultRecorder) -> None:
    daemon, fake_log = fake_deployment(box, start_daemon)
    daemon_pid = daemon.main_pid(daemon.unit)
    fds_before = open_fds(daemon_pid)
    bodies = [completion_body(f"client {n} of {CLIENTS}") for n in range(CLIENTS)]

    async def crowd() -> list[int]:
        limits = httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=0)
        async with httpx.AsyncClient(timeout=CROWD_BOUND_S + 30, limits=limits) as client:
            replies = await asyncio.gather(*(client.post(
                f"{daemon.proxy_url}/v1/chat/completions", content=body,
                headers={"content-type": "application/json"}) for body in bodies))
        return [reply.status_code for reply in replies]

    started = time.monotonic()
    statuses = asyncio.run(crowd())
    took_s = time.monotonic() - started

    assert statuses == [200] * CLIENTS, {s: statuses.count(s) for s in set(statuses)}
    assert took_s < CROWD_BOUND_S
    seen = deliveries(fake_log)
    assert all(seen.count(hashlib.sha256(body).hexdigest()) == 1 for body in bodies)  # none lost, none twice
    daemon.wait_for("the traffic log to count every request",
                    lambda: traffic_statuses(box) == {"requests": CLIENTS, "failed": 0}, 30)
    daemon.wait_for("the daemon to let its connections go", lambda: open_fds(daemon_pid) <= fds_before + 5, 30)
    fault_results.record(
        f"{CLIENTS} clients at once (FAKE backend)",
        bound=f"{CLIENTS} answers 200 within {CROWD_BOUND_S:g} s; each request reached the server once; "
              "the daemon's file descriptors back to where they were",
        measured=f"{CLIENTS} x 200 in {took_s:.1f} s; 0 lost, 0 duplicated; {open_fds(daemon_pid)} fds "
                 f"after, {fds_before} before")


@real_stack
def test_a_backend_500_and_invalid_json_pass_through_once_and_the_next_request_is_served(
        box: Box, start_daemon: Any, fault_results: FaultRecorder) -> None:
    daemon, fake_log = fake_deployment(box, start_daemon)
    failing = completion_body(f"{ANSWER_500_MARKER.decode()} please")
    garbage = completion_body(f"{GARBAGE_MARKER.decode()} please")
    with httpx.Client(timeout=30) as client:
        def send(body: bytes) -> httpx.Response:
            return client.post(f"{daemon.proxy_url}/v1/chat/completions", content=body,
                               headers={"content-type": "application/json"})

        started = time.monotonic()
        error = send(failing)
        error_s = time.monotonic() - started
        cut = send(garbage)
        after = send(completion_body("and now a normal request"))

    assert error.status_code == 500 and error.json()["error"]["message"] == "FAKE: internal error"
    assert error_s < 5.0  # passed on, not held or retried
    assert cut.status_code == 200 and cut.content == GARBAGE  # byte for byte, however broken
    assert after.status_code == 200 and after.json()["choices"]
    seen = deliveries(fake_log)
    assert seen.count(hashlib.sha256(failing).hexdigest()) == 1  # a 500 is an answer: never re-sent
    assert seen.count(hashlib.sha256(garbage).hexdigest()) == 1
    daemon.wait_for("the traffic log to record all three",
                    lambda: traffic_statuses(box) == {"requests": 3, "failed": 1}, 30)
    fault_results.record(
        "a backend answering 500, then invalid JSON (FAKE backend)",
        bound="passed on once within 5 s, byte for byte; the next request served; traffic records the 500",
        measured=f"500 after {error_s:.2f} s, delivered once; invalid JSON byte for byte; next request 200")
