"""The daemon's limits against one local client, for real: the daemon as a systemd unit with a low
`LimitNOFILE=`, its proxy in front of the real llama-server (issue 32's probes).

- Twice the open-files limit of idle connections: before, ~1,000 of them used up the daemon's
  1,024 open files, the watchdog ping raised EMFILE uncaught and the daemon exited. Now the proxy
  caps its client connections below what the limit leaves and closes the oldest idle ones to make
  room: a normal request is answered, the daemon's heartbeat goes on through the attack and the
  same process still runs.
- Chat bodies with nested arrays 900 to 995 deep (the probe's was ~970): before, json.loads took it
  and the recorder's json.dumps raised RecursionError, the stream never ended, and the in-flight
  count never fell (the next switch's drain waited 60 s). Now the client gets llama-server's
  answer whole and the counts return to 0.
"""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

import httpx

from tests.conftest import Box
from tests.fakes.http1_raw import hold_idle
from tests.system.daemon_rig import RunningDaemon, chat, real_stack

NOFILE = 256


def settled(daemon: RunningDaemon, box: Box) -> bool:
    state = daemon.proxy_state(box.unit)
    return bool(state["in_flight"] == 0 and state["active"] == 0)


@real_stack
def test_twice_the_open_files_limit_of_idle_connections_leave_the_daemon_running_and_answering(
        box: Box, start_daemon: Any) -> None:
    daemon = start_daemon(unit_extra=f"LimitNOFILE={NOFILE}\n")
    box.specd("switch", "autoregressive", check=True)
    pid = daemon.main_pid(daemon.unit)
    held = hold_idle(daemon.proxy_port, 2 * NOFILE)
    try:
        attacked_at = time.time()
        answer = httpx.post(f"{daemon.proxy_url}/v1/chat/completions", json=chat(False, 4), timeout=180)
        assert answer.status_code == 200 and answer.json()["choices"], answer.text
        # a heartbeat (status file, watchdog ping) after the attack began: the loop lives through it
        daemon.wait_for("a heartbeat after the attack", lambda: daemon.status()["heartbeat_at"] > attacked_at + 1, 60)
    finally:
        for sock in held:
            sock.close()
    assert daemon.main_pid(daemon.unit) == pid, "the daemon was restarted"
    assert daemon.systemctl("is-active", daemon.unit).stdout.strip() == "active"
    assert "too many open files" not in daemon.log().lower()
    assert "idle one(s) to make room" in daemon.log()


@real_stack
def test_a_deeply_nested_body_gets_the_servers_answer_and_the_counts_return_to_zero(
        box: Box, start_daemon: Any) -> None:
    daemon = start_daemon()
    box.specd("switch", "autoregressive", check=True)
    for depth, stream in itertools.product(range(900, 1000, 5), (False, True)):
        body = chat(stream, 4)
        body["messages"][0]["content"] = "NESTED"
        raw = json.dumps(body).replace('"NESTED"', "[" * depth + "]" * depth)
        with httpx.Client(timeout=180) as client:
            answer = client.post(f"{daemon.proxy_url}/v1/chat/completions", content=raw,
                                 headers={"content-type": "application/json"})
        direct = httpx.post(f"http://127.0.0.1:{box.port}/v1/chat/completions", content=raw,
                            headers={"content-type": "application/json"}, timeout=180)
        assert answer.status_code == direct.status_code, (answer.text, direct.text)  # the server's own answer
        if answer.headers.get("content-type", "").startswith("text/event-stream"):
            assert answer.text.rstrip().endswith("[DONE]")
        daemon.wait_for("the proxy's in-flight counts to return to 0", lambda: settled(daemon, box), 60)
