"""What the proxy answers and records around each request, over real HTTP on loopback against the FAKE backend
of tests/fakes/proxy_rig.py: the count the nightly run watches, holds while the backend loads or past their timeout,
a request during a shutdown, a client that leaves, what is remembered for a flip's warm-up and what capture keeps.
Written from the survivors of the proxy's mutation run (benchmarks/results/mutation-proxy.md)."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from specd.traffic.capture import BodyCapture
from tests.fakes.proxy_fakes import chat_body, eventually, read_stream
from tests.unit.test_proxy import Rig, make_rig


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    made = make_rig(tmp_path)
    yield made
    made.close()


def test_the_nightly_run_sees_each_request_the_proxy_accepted_also_one_already_answered(rig: Rig) -> None:
    """The night's bench stops when `accepted` rises past where it began (specd.tune.night.TrafficWatch): a
    request answered between two of its polls is seen only through this count."""
    assert rig.front.call(lambda: rig.proxy.accepted) == 0
    with httpx.Client(timeout=10) as client:
        for _ in range(3):
            assert client.post(f"{rig.url}/v1/chat/completions", json=chat_body()).status_code == 200
    assert rig.front.call(lambda: (rig.proxy.accepted, rig.proxy.in_flight)) == (3, 0)


def test_a_request_held_while_the_backend_loads_logs_no_error(rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    """The gate polls /health until the backend has loaded; each poll's answer passes the status-line hook
    that streams use, which must not log "proxy error" for a probe."""
    rig.fake.loading = True
    answers: list[int] = []
    with caplog.at_level(logging.ERROR, logger="specd"):
        held = threading.Thread(target=lambda: answers.append(httpx.post(
            f"{rig.url}/v1/chat/completions", json=chat_body(), timeout=30).status_code))
        held.start()
        eventually(lambda: rig.fake.health_polls >= 2, "the gate to poll /health while the backend loads")
        rig.fake.loading = False
        held.join(30)
        with httpx.Client(timeout=10) as client:  # and a stream, relayed from the status line's hook
            assert read_stream(client, f"{rig.url}/v1/chat/completions", chat_body(stream=True))[-1] == "[DONE]"
    assert answers == [200]
    assert [r.getMessage() for r in caplog.records] == []


def test_a_chat_request_is_remembered_for_the_next_flips_warm_up(rig: Rig) -> None:
    body = json.dumps(chat_body("remember me")).encode()
    with httpx.Client(timeout=10) as client:
        assert client.post(f"{rig.url}/v1/chat/completions", content=body,
                           headers={"content-type": "application/json"}).status_code == 200
        assert client.get(f"{rig.url}/v1/models").status_code == 200  # not a generation: not remembered
    recent = rig.front.call(rig.proxy.recent.newest)
    assert [(r.path, r.body) for r in recent] == [("/v1/chat/completions", body)]


def test_held_past_the_hold_timeout_while_loading_the_client_gets_the_backends_own_503(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, hold_timeout_s=1.0)
    try:
        rig.fake.loading = True
        response = httpx.post(f"{rig.url}/v1/chat/completions", json=chat_body(), timeout=30)
        assert response.status_code == 503
        assert response.json()["error"]["message"] == "Loading model"  # what llama-server says, not the proxy
        assert response.headers["content-type"] == "application/json"
        assert [(r.status, r.error) for r in rig.records()] == [  # type: ignore[attr-defined]
            (503, "held past the hold timeout: the backend still answered 503")]
    finally:
        rig.front.stop()
        rig.backend.stop()
        rig.recorder.close()


def test_a_request_that_arrives_during_the_shutdown_s_grace_is_answered_503_and_never_forwarded(
        tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    try:
        assert httpx.post(f"{rig.url}/v1/chat/completions", json=chat_body(), timeout=30).status_code == 200
        hanging = threading.Thread(target=lambda: httpx.post(
            f"{rig.url}/v1/chat/completions", json=chat_body(x_fake_hang_before_answer=True), timeout=30))
        hanging.start()
        eventually(lambda: len(rig.fake.requests) == 2, "the hanging request to reach the backend")
        stopping = threading.Thread(target=lambda: rig.front.call(lambda: rig.proxy.shutdown(3.0)))
        stopping.start()  # its grace waits for the request in flight
        eventually(lambda: rig.front.call(lambda: rig.proxy.shutting_down), "the shutdown to begin")
        late = httpx.post(f"{rig.url}/v1/chat/completions", json=chat_body("late"), timeout=30)
        assert late.status_code == 503 and late.json()["error"]["message"] == "specd proxy is shutting down"
        assert len(rig.fake.requests) == 2  # not the late one, though a pooled connection to the backend was idle
        stopping.join(30)
        hanging.join(30)
    finally:
        rig.front.stop()
        rig.backend.stop()
        rig.recorder.close()


def test_a_client_that_leaves_before_the_answer_is_recorded_as_gone_without_an_error(
        rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="specd"):
        with pytest.raises(httpx.ReadTimeout):  # the client gives up while the backend is silent
            httpx.post(f"{rig.url}/v1/chat/completions", json=chat_body(x_fake_hang_before_answer=True), timeout=0.5)
        eventually(lambda: rig.front.call(lambda: rig.proxy.in_flight) == 0, "the proxy to let the request go")
    assert [(r.status, r.error) for r in rig.records()] == [(499, "client went away")]  # type: ignore[attr-defined]
    assert [r.getMessage() for r in caplog.records] == []


def test_a_captured_body_carries_the_concurrency_it_arrived_at(tmp_path: Path) -> None:
    """Replay rebuilds the traffic's concurrency from this (specd.traffic.capture: "concurrency")."""
    capture = BodyCapture(tmp_path / "capture", max_bytes=1 << 20)
    rig = make_rig(tmp_path, capture=capture)
    try:
        def first() -> None:
            with contextlib.suppress(httpx.HTTPError):  # cut when the rig stops: its answer is not the point
                httpx.post(f"{rig.url}/v1/chat/completions", json=chat_body("first", x_fake_hang_before_answer=True),
                           timeout=30)

        waiting = threading.Thread(target=first)
        waiting.start()
        eventually(lambda: rig.fake.requests, "the first request to reach the backend")
        assert httpx.post(f"{rig.url}/v1/chat/completions", json=chat_body("second"), timeout=10).status_code == 200
        capture.flush()
        assert [(b["messages"][0]["content"], b["specd"]["concurrency"]) for b in capture.read_all()] == [
            ("first", 1), ("second", 2)]
    finally:
        rig.front.stop()
        rig.backend.stop()
        rig.recorder.close()
        waiting.join(30)
