"""The daemon writes traffic rows and captured bodies off the request path (writer threads); a
daemon stopped right after answering has still written every one of them before it exits.

The real daemon as a systemd user unit, its proxy in front of the real llama-server.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx

from specd.traffic.capture import CAPTURE_NAME
from specd.traffic.records import fetch_records, open_db
from tests.conftest import Box
from tests.fakes.proxy_fakes import read_stream
from tests.system.daemon_rig import chat, real_stack

CLIENTS, EACH = 4, 6


@real_stack
def test_a_daemon_stopped_right_after_answering_has_written_every_row_and_body(box: Box, start_daemon: Any) -> None:
    box.specd("switch", "autoregressive", check=True)
    daemon = start_daemon(capture=True)
    answers: list[str] = []

    def client(index: int) -> None:
        with httpx.Client(timeout=120) as http:
            for turn in range(EACH):
                body = {**chat(turn % 2 == 0, 8), "messages": [{"role": "user", "content": f"c{index} t{turn}"}]}
                if body["stream"]:
                    answers.append(read_stream(http, f"{daemon.proxy_url}/v1/chat/completions", body)[-1])
                else:
                    reply = http.post(f"{daemon.proxy_url}/v1/chat/completions", json=body)
                    answers.append(str(reply.status_code))

    threads = [threading.Thread(target=client, args=(index,)) for index in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    stopped = daemon.systemctl("stop", daemon.unit)  # at once: the writers may still hold the last ones
    assert stopped.returncode == 0, daemon.log()
    assert sorted(answers) == sorted(["200", "[DONE]"] * (CLIENTS * EACH // 2))
    conn = open_db(daemon.state_dir / "specd.db")
    try:
        rows = fetch_records(conn, 0)
    finally:
        conn.close()
    assert len(rows) == CLIENTS * EACH and all(r.status == 200 for r in rows), daemon.log()
    captured = daemon.state_dir / "capture" / box.deployment.name / CAPTURE_NAME
    asked = sorted(json.loads(line)["messages"][0]["content"] for line in captured.read_text().splitlines())
    assert asked == sorted(f"c{i} t{t}" for i in range(CLIENTS) for t in range(EACH))
