"""The health gate on a busy real server: its 1-token completion queues behind a client's long answer
(one slot, as the tiny profiles run) and is waited for, within the health timeout, instead of failing
the switch on the HTTP client's read timeout. On a loaded CI box (2026-11-29) that read timeout failed a
switch and then its revert: clients had reached the restarted server before the gate's completion."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from specd.deploy.health import wait_healthy
from specd.deploy.systemd import PydbusSystemd
from tests.conftest import Box

pytestmark = [pytest.mark.systemd, pytest.mark.llama, pytest.mark.usefixtures("real_server")]

LONG_ANSWER = 300  # tokens: several seconds of decoding at one thread, far past the client's 2 s read timeout


def test_the_gate_waits_for_a_completion_queued_behind_a_clients_long_answer(box: Box) -> None:
    box.specd("switch", "autoregressive", check=True)
    url = f"http://127.0.0.1:{box.port}"
    answered: list[dict[str, object]] = []
    body = {"model": "tiny", "prompt": "Chapter One\n\n", "max_tokens": LONG_ANSWER, "temperature": 0,
            "ignore_eos": True}
    client_request = threading.Thread(
        target=lambda: answered.append(httpx.post(f"{url}/v1/completions", json=body, timeout=300).json()))
    client_request.start()
    deadline = time.monotonic() + 30
    while not any(slot.get("is_processing") for slot in httpx.get(f"{url}/slots", timeout=5).json()):
        assert time.monotonic() < deadline, "the client's request never started"
        time.sleep(0.05)
    systemd = PydbusSystemd("user")  # the box's private manager (its environment names the bus)
    started = time.monotonic()
    with httpx.Client(timeout=httpx.Timeout(2.0, connect=2.0)) as impatient:  # shorter than the long answer
        result = wait_healthy(url, "tiny", timeout_s=240, stability_s=0,
                             unit_state=lambda: systemd.unit_state(box.unit), client=impatient)
    waited = time.monotonic() - started
    client_request.join(300)
    assert result.ok
    assert answered and answered[0]["usage"]["completion_tokens"] == LONG_ANSWER  # type: ignore[index]
    assert waited > 2.0, f"the gate answered in {waited:.1f} s: the completion did not queue behind the client's"
