"""The proxy over real HTTP on loopback, against a fake backend that can be stopped and started."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from specd.daemon.metrics import SpecdMetrics
from specd.proxy.proxy import Backend, Proxy, ProxySettings
from specd.traffic.capture import BodyCapture
from specd.traffic.records import Recorder, fetch_records, open_db
from tests.fakes.proxy_fakes import (
    ServerThread,
    chat_body,
    eventually,
    free_port,
    read_stream,
)
from tests.fakes.proxy_rig import ProxyRig

Rig = ProxyRig


def make_rig(tmp_path: Path, *, hold_timeout_s: float = 20.0, capture: BodyCapture | None = None,
             max_body_bytes: int = 1 << 20, tokens: int = 8, token_delay_s: float = 0.0) -> ProxyRig:
    """This file's rig: the shared one (tests/fakes/proxy_rig.py) with the daemon's metrics."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    return ProxyRig(tmp_path, capture=capture, metrics=SpecdMetrics(), tokens=tokens, token_delay_s=token_delay_s,
                    hold_timeout_s=hold_timeout_s, max_body_bytes=max_body_bytes)


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[ProxyRig]:
    made = make_rig(tmp_path)
    yield made
    made.close()


def test_non_streaming_request_passes_through_with_auth_and_is_recorded(rig: Rig) -> None:
    with httpx.Client(timeout=10) as client:
        response = client.post(f"{rig.url}/v1/chat/completions", json=chat_body(),
                               headers={"Authorization": "Bearer sk-secret"})
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "x" * 8
    assert rig.fake.requests[-1]["headers"]["authorization"] == "Bearer sk-secret"
    [record] = rig.records()
    assert (record.endpoint, record.stream, record.status) == ("/v1/chat/completions", False, 200)  # type: ignore[attr-defined]
    assert record.task_class == "code" and record.profile == "plain"  # type: ignore[attr-defined]
    assert (record.prompt_tokens, record.completion_tokens) == (10, 8)  # type: ignore[attr-defined]
    assert (record.draft_n, record.draft_n_accepted, record.predicted_n) == (4, 3, 8)  # type: ignore[attr-defined]
    assert 0 < record.held_ms <= record.total_ms < 60_000  # type: ignore[attr-defined]  # ms, from arrival to the end
    conn = open_db(rig.db)
    dumped = json.dumps([dict(row) for row in conn.execute("SELECT * FROM traffic")])
    conn.close()
    assert "sk-secret" not in dumped and "Write a python" not in dumped


def test_the_status_the_control_socket_reports(rig: Rig) -> None:
    """What `specd status` and the switch's drain read of the proxy (its control socket serves this)."""
    assert rig.front.call(rig.proxy.status) == {"backend": rig.backend.url, "profile": "plain", "in_flight": 0,
                                                "active": 0, "paused": False, "healthy": True}
    rig.front.call(lambda: rig.proxy.pause(30))
    assert rig.front.call(rig.proxy.status)["paused"] is True
    assert rig.front.call(lambda: rig.proxy.renew(30)) is True  # the switch's lease renewal
    rig.front.call(rig.proxy.resume)
    assert rig.front.call(lambda: rig.proxy.renew(30)) is False  # nothing left to renew


def test_stream_arrives_whole_and_in_order_and_its_shape_is_recorded(rig: Rig) -> None:
    with httpx.Client(timeout=10) as client:
        payloads = read_stream(client, f"{rig.url}/v1/chat/completions", chat_body(stream=True))
    contents = [json.loads(p)["choices"][0]["delta"].get("content") for p in payloads[:-1]]
    assert contents == [None] + [f"t{i}" for i in range(8)] + [None]
    assert payloads[-1] == "[DONE]"
    [record] = rig.records()
    assert record.stream and record.status == 200  # type: ignore[attr-defined]
    assert record.completion_tokens == 8 and record.ttft_ms is not None  # type: ignore[attr-defined]
    assert record.draft_n_accepted == 3  # type: ignore[attr-defined]


def test_requests_sent_while_the_backend_restarts_are_held_not_failed(rig: Rig) -> None:
    rig.backend.stop()
    results: list[object] = []

    def fire(stream: bool) -> None:
        with httpx.Client(timeout=30) as client:
            try:
                if stream:
                    results.append(read_stream(client, f"{rig.url}/v1/chat/completions", chat_body(stream=True))[-1])
                else:
                    results.append(client.post(f"{rig.url}/v1/chat/completions", json=chat_body()).status_code)
            except httpx.HTTPError as exc:
                results.append(exc)

    threads = [threading.Thread(target=fire, args=(i % 2 == 0,)) for i in range(6)]
    for thread in threads:
        thread.start()
    eventually(lambda: rig.proxy.in_flight == 6, "the six requests to be held at the proxy")
    rig.fake.loading = True  # back on its port but still "Loading model", like llama-server
    rig.backend.start()
    eventually(lambda: rig.fake.loading_answers >= 2, "the proxy to find the backend loading")
    rig.fake.loading = False
    for thread in threads:
        thread.join(30)
    assert sorted(map(str, results)) == sorted(["200"] * 3 + ["[DONE]"] * 3)
    records = rig.records()
    assert len(records) == 6 and all(r.held_ms > 0 and r.status == 200 for r in records)  # type: ignore[attr-defined]
    assert all(r.held_ms <= r.total_ms for r in records)  # type: ignore[attr-defined]  # the hold is part of the whole
    assert rig.front.call(lambda: (len(rig.proxy._waiting), len(rig.proxy._cut))) == (0, 0)  # nothing kept per request
    held = rig.metrics.registry.get_sample_value
    assert held("specd_proxy_hold_seconds_count") >= 6 and held("specd_proxy_hold_seconds_sum") > 0  # each hold timed


def test_hold_timeout_answers_503_instead_of_hanging(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rig = make_rig(tmp_path, hold_timeout_s=0.5)
    try:
        rig.backend.stop()
        with caplog.at_level(logging.ERROR, logger="specd"), httpx.Client(timeout=10) as client:
            response = client.post(f"{rig.url}/v1/chat/completions", json=chat_body())
        assert response.status_code == 503
        assert response.json()["error"] == {"message": "backend not healthy after 0.5 s", "type": "unavailable_error",
                                             "code": 503}
        assert response.headers["retry-after"] == "5" and response.headers["content-type"] == "application/json"
        [record] = rig.records()
        assert record.status == 503 and record.held_ms >= 500  # type: ignore[attr-defined]  # held the whole timeout
        assert [r.getMessage() for r in caplog.records] == []  # answered once, then let go: no proxy error
    finally:
        rig.front.stop()
        rig.recorder.close()


def test_bad_bodies_do_not_wedge_the_proxy(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, max_body_bytes=1000)
    try:
        with httpx.Client(timeout=10) as client:
            malformed = client.post(f"{rig.url}/v1/chat/completions", content=b"{not json",
                                    headers={"content-type": "application/json"})
            huge = client.post(f"{rig.url}/v1/chat/completions", content=b"x" * 5000)
            fine = client.post(f"{rig.url}/v1/chat/completions", json=chat_body())
        assert malformed.status_code == 400  # the backend's own answer, passed through
        assert huge.status_code == 413
        at_the_limit = json.dumps(chat_body("x")).encode()
        at_the_limit = json.dumps(chat_body("x" * (1 + 1000 - len(at_the_limit)))).encode()
        assert len(at_the_limit) == 1000
        with httpx.Client(timeout=10) as client:
            assert client.post(f"{rig.url}/v1/chat/completions", content=at_the_limit,
                               headers={"content-type": "application/json"}).status_code == 200  # the limit is allowed
        assert fine.status_code == 200
        assert rig.proxy.in_flight == 0
    finally:
        rig.front.stop()
        rig.backend.stop()
        rig.recorder.close()


def test_a_client_that_hangs_up_mid_stream_frees_the_backend(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, tokens=200, token_delay_s=0.02)
    try:
        with httpx.Client(timeout=10) as client, \
                client.stream("POST", f"{rig.url}/v1/chat/completions", json=chat_body(stream=True)) as response:
            for _ in response.iter_raw():
                break
        eventually(lambda: not rig.proxy.in_flight and rig.fake.closed_early, "the proxy to hang up on the backend")
        assert rig.proxy.in_flight == 0 and rig.proxy.active == 0
        assert rig.fake.closed_early == 1
        assert rig.records()[0].status == 499  # type: ignore[attr-defined]
    finally:
        rig.front.stop()
        rig.backend.stop()
        rig.recorder.close()


def test_a_stream_the_backend_drops_is_ended_cleanly_and_not_resent(rig: Rig) -> None:
    rig.fake.drop_stream_after = 3
    with httpx.Client(timeout=10) as client:
        payloads = read_stream(client, f"{rig.url}/v1/chat/completions", chat_body(stream=True))
    assert json.loads(payloads[-1])["error"]["message"] == "the backend dropped the stream"
    assert len(rig.fake.requests) == 1
    assert rig.records()[0].status == 502  # type: ignore[attr-defined]


def test_shutdown_cuts_a_long_stream_on_an_event_boundary(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, tokens=500, token_delay_s=0.01)
    try:
        got: list[list[str]] = []

        def consume() -> None:
            with httpx.Client(timeout=30) as client:
                got.append(read_stream(client, f"{rig.url}/v1/chat/completions", chat_body(stream=True)))

        reader = threading.Thread(target=consume)
        reader.start()
        eventually(lambda: rig.fake.events_sent >= 3, "the stream to be under way")
        rig.front.call(lambda: rig.proxy.shutdown(0.2))
        reader.join(20)
        [payloads] = got  # read_stream raises on a half-written event
        assert json.loads(payloads[-1])["error"]["message"] == "specd proxy is shutting down"
        assert 1 < len(payloads) < 500
        assert rig.records()[0].status == 503  # type: ignore[attr-defined]
    finally:
        rig.front.stop()
        rig.backend.stop()
        rig.recorder.close()


def test_shutdown_answers_held_and_unanswered_requests_503_at_once_not_500(tmp_path: Path) -> None:
    # SIGTERM to the daemon while a switch drains: a request held by the pause must not be forwarded
    # (it answers 503 at once), and one the backend never answered gets a clean 503 at the end of
    # the grace period, not the 500 and traceback of uvicorn cancelling it.
    rig = make_rig(tmp_path)
    try:
        answers: dict[str, tuple[int, float]] = {}

        def send(name: str, body: dict[str, object]) -> None:
            with httpx.Client(timeout=30) as client:
                reply = client.post(f"{rig.url}/v1/chat/completions", json=body)
                answers[name] = (reply.status_code, time.monotonic())

        waiting = threading.Thread(target=send, args=("waiting", chat_body(x_fake_hang_before_answer=True)))
        waiting.start()
        eventually(lambda: rig.fake.requests, "the first request to reach the backend")
        rig.front.call(lambda: rig.proxy.pause(30))
        held = threading.Thread(target=send, args=("held", chat_body("held by the pause")))
        held.start()
        eventually(lambda: rig.front.call(lambda: rig.proxy.in_flight) >= 2, "the second request to be held")
        rig.front.call(lambda: rig.proxy.shutdown(1.0))
        grace_ended = time.monotonic()  # the shutdown returns once its grace is over and the rest is cut
        held.join(10)
        waiting.join(10)
        assert answers["held"][0] == 503 and answers["held"][1] < grace_ended  # at once, not after the grace
        assert answers["waiting"][0] == 503  # cut at the grace's end, not left to the client's 30 s timeout
        assert len(rig.fake.requests) == 1  # the held request never reached the backend
        statuses = sorted((r.status, r.error) for r in rig.records())  # type: ignore[attr-defined]
        assert statuses == [(503, "specd proxy is shutting down")] * 2
    finally:
        rig.front.stop()
        rig.backend.stop()
        rig.recorder.close()


def test_drain_waits_for_streams_and_holds_new_requests_until_resume(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, tokens=30, token_delay_s=0.02)
    try:
        done: list[str] = []

        def stream_one() -> None:
            with httpx.Client(timeout=30) as client:
                done.append(read_stream(client, f"{rig.url}/v1/chat/completions", chat_body(stream=True))[-1])

        first = threading.Thread(target=stream_one)
        first.start()
        eventually(lambda: rig.proxy.active == 1, "the first stream to reach the backend")
        rig.front.call(lambda: rig.proxy.pause(30))
        assert rig.front.call(lambda: rig.proxy.wait_idle(20)) is True
        # drained: the in-flight stream was relayed to its end before wait_idle returned
        assert [(r.stream, r.status) for r in rig.records()] == [(True, 200)]  # type: ignore[attr-defined]
        first.join(10)
        assert done == ["[DONE]"]
        second = threading.Thread(target=stream_one)
        second.start()
        eventually(lambda: rig.proxy.in_flight == 1, "the second request to arrive")
        assert rig.proxy.active == 0 and len(rig.fake.requests) == 1  # held at the gate while paused
        rig.front.call(rig.proxy.resume)
        second.join(20)
        assert done == ["[DONE]", "[DONE]"]
    finally:
        rig.front.stop()
        rig.backend.stop()
        rig.recorder.close()


def test_captured_bodies_are_private_and_bounded(tmp_path: Path) -> None:
    capture = BodyCapture(tmp_path / "capture", max_bytes=2000)
    rig = make_rig(tmp_path, capture=capture)
    try:
        with httpx.Client(timeout=10) as client:
            for index in range(30):
                client.post(f"{rig.url}/v1/chat/completions", json=chat_body(f"question {index}"),
                            headers={"Authorization": "Bearer sk-secret"})
        capture.flush()  # bodies are written off the request path
        files = sorted((tmp_path / "capture").iterdir())
        assert files and sum(f.stat().st_size for f in files) <= 2000
        assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)
        assert stat.S_IMODE(os.stat(tmp_path / "capture").st_mode) == 0o700
        bodies = capture.read_all()
        assert bodies[-1]["messages"][0]["content"] == "question 29"
        assert not any("sk-secret" in f.read_text() for f in files)
    finally:
        rig.front.stop()
        rig.backend.stop()
        rig.recorder.close()


def test_metrics_count_every_request_and_traffic_only_completions(rig: Rig) -> None:
    with httpx.Client(timeout=10) as client:
        for _ in range(3):
            client.post(f"{rig.url}/v1/chat/completions", json=chat_body())
        assert client.get(f"{rig.url}/v1/models").json()["data"][0]["id"] == "fake"
    text = rig.metrics.render().decode()
    assert 'specd_proxy_requests_total{endpoint="/v1/chat/completions",status="200"} 3.0' in text
    assert 'specd_proxy_requests_total{endpoint="/v1/models",status="200"} 1.0' in text
    assert len(rig.records()) == 3
    value = rig.metrics.registry.get_sample_value
    assert (value("specd_proxy_hold_seconds_count"), value("specd_proxy_hold_seconds_sum")) == (4.0, 0.0)  # none held
    assert value("specd_proxy_request_seconds_count", {"endpoint": "/v1/chat/completions"}) == 3
    with httpx.Client(timeout=10) as client:
        assert read_stream(client, f"{rig.url}/v1/chat/completions", chat_body(stream=True))[-1] == "[DONE]"
    assert value("specd_proxy_ttft_seconds_count") == 1 and 0 < value("specd_proxy_ttft_seconds_sum") < 30  # seconds


def test_llama_server_timings_from_the_emulator_reach_the_traffic_table(tmp_path: Path) -> None:
    port = free_port()
    emulator = subprocess.Popen(
        [sys.executable, "-m", "specd.emulator.server", "--port", str(port), "--alias", "emu",
         "--spec-type", "draft-mtp",
         "--emulator-time-scale", "0.02", "--metrics"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    recorder = Recorder(tmp_path / "state.db")
    proxy = Proxy(ProxySettings(health_poll_s=0.05), lambda: Backend(f"http://127.0.0.1:{port}", "mtp"),
                  recorder=recorder)
    front = ServerThread(proxy, free_port()).start()
    try:
        body = chat_body("Write a python function that parses a CSV file", max_tokens=64, model="emu")
        with httpx.Client(timeout=60) as client:  # the emulator is still starting: the proxy holds
            assert client.post(f"{front.url}/v1/chat/completions", json=body).status_code == 200
            assert read_stream(client, f"{front.url}/v1/chat/completions", {**body, "stream": True})[-1] == "[DONE]"
        recorder.flush()
        conn = open_db(tmp_path / "state.db")
        records = fetch_records(conn, 0)
        conn.close()
        assert [(r.stream, r.status, r.task_class) for r in records] == [(False, 200, "code"), (True, 200, "code")]
        for r in records:
            assert r.completion_tokens and r.predicted_n and r.predicted_ms
            assert r.draft_n is not None and r.draft_n_accepted is not None and r.draft_n_accepted <= r.draft_n
    finally:
        front.stop()
        recorder.close()
        emulator.terminate()
        emulator.wait(10)
