"""A request that crashes the server costs one restart, not a crash loop (issue: the proxy re-sent
it each time the server came back, and other clients got nothing for two minutes).

The backend is a FAKE (`FakeCrashingBackend`): llama-server cannot be made to abort on demand
here, so this one drops the connection after reading a request that contains POISON and stops
listening for a moment, the way a GGML_ASSERT abort followed by systemd's restart looks from
outside.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from specd.proxy.crashes import GATHER_S, Crash, DroppedRequest, request_id
from specd.proxy.proxy import Backend, Proxy, ProxySettings
from specd.proxy.resend import MAX_DELIVERIES
from specd.traffic.records import Recorder, fetch_records, open_db
from tests.fakes.proxy_fakes import ServerThread, chat_body, eventually, free_port


class FakeCrashingBackend:
    """Answers like llama-server; "crashes" (drops the connection, then is down `down_s`) on POISON, and on
    STREAM_THEN_POISON after the first event of a stream; drops the connection on DROP and stays up (a
    handler that dies, a server that refuses a head)."""

    def __init__(self, down_s: float = 0.6) -> None:
        self.port = free_port()
        self.down_s = down_s
        self.poison_seen = 0
        self.drop_seen = 0
        self.served = 0
        self._server: http.server.ThreadingHTTPServer | None = None
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeCrashingBackend:
        backend = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                return

            def _send(self, document: dict[str, Any]) -> None:
                payload = json.dumps(document).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self) -> None:
                self._send({"status": "ok"} if self.path == "/health" else {"data": [{"id": "fake"}]})

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if b"STREAM_THEN_POISON" in body:  # a crash after the first event of a stream
                    with backend._lock:
                        backend.poison_seen += 1
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    event = b'data: {"choices": [{"delta": {"content": "x"}}]}\n\n'
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.close()
                    threading.Thread(target=backend._crash_and_restart, daemon=True).start()
                    return
                if b"POISON" in body:
                    with backend._lock:
                        backend.poison_seen += 1
                    self.close_connection = True
                    self.connection.close()  # no status line: the abort
                    threading.Thread(target=backend._crash_and_restart, daemon=True).start()
                    return
                if b"DROP" in body:
                    with backend._lock:
                        backend.drop_seen += 1
                    self.close_connection = True  # no status line; /health still answers
                    return
                with backend._lock:
                    backend.served += 1
                self._send({"choices": [{"message": {"role": "assistant", "content": "ok"}}],
                            "usage": {"prompt_tokens": 3, "completion_tokens": 1}})

        self._handler = Handler
        self._serve()
        return self

    def _serve(self) -> None:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), self._handler)
        server.daemon_threads = True
        self._server = server
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def _crash_and_restart(self) -> None:
        server = self._server
        assert server is not None
        server.shutdown()
        server.server_close()
        time.sleep(self.down_s)
        self._serve()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


Rig = tuple[FakeCrashingBackend, str, Recorder, Path, list[Crash]]


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    backend = FakeCrashingBackend().start()
    db = tmp_path / "state.db"
    recorder = Recorder(db)
    crashes: list[Crash] = []
    proxy = Proxy(ProxySettings(health_poll_s=0.05, unit="t", hold_timeout_s=20),
                  lambda: Backend(backend.url, "plain"), recorder=recorder, on_crash=crashes.append)
    front = ServerThread(proxy, free_port()).start()
    yield backend, front.url, recorder, db, crashes
    front.stop()
    backend.stop()


def test_a_poison_request_crashes_the_server_once_and_is_answered_502(rig: Rig,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    backend, url, recorder, db, crashes = rig
    poison = json.dumps(chat_body("POISON please")).encode()
    poison_id = hashlib.sha256(poison).hexdigest()[:12]
    with httpx.Client(timeout=30) as client:
        assert client.post(f"{url}/v1/chat/completions", json=chat_body()).status_code == 200
        started = time.monotonic()
        poisoned = client.post(f"{url}/v1/chat/completions", content=poison,
                               headers={"content-type": "application/json"})
        answered_in = time.monotonic() - started
        assert poisoned.status_code == 502 and "may have crashed on it" in poisoned.text
        assert poison_id in poisoned.text  # the client learns which of its requests it was
        assert answered_in < 5, "the poison request was held instead of answered"
        others = [client.post(f"{url}/v1/chat/completions", json=chat_body(f"fine {i}")) for i in range(5)]
    assert [r.status_code for r in others] == [200] * 5  # served once the server is back
    # answered: the proxy is done with it (a re-send comes before the answer, never after)
    assert backend.poison_seen == 1
    recorder.flush()
    rows = fetch_records(open_db(db), 0.0)
    failed = [r for r in rows if r.status == 502]
    assert len(failed) == 1 and "not re-sent" in (failed[0].error or "")
    # the crash is reported once, naming that request by its body's hash (never its text); the drops
    # of one crash are gathered for GATHER_S, then reported
    with caplog.at_level(logging.WARNING, logger="specd"):
        eventually(lambda: crashes, "the crash report", timeout_s=GATHER_S + 20)
    assert len(crashes) == 1 and [d.request_id for d in crashes[0].dropped] == [poison_id]
    dropped = crashes[0].dropped[0]
    assert (dropped.phase, dropped.profile, dropped.body_bytes, dropped.stream) == (
        "before answering", "plain", len(poison), False)
    described = crashes[0].describe()
    assert f"request {poison_id}" in described and "likely cause" in described and "POISON" not in described
    # what the owner reads in the journal and history to find the request again
    assert (f"llama-server (profile plain) went down right after taking request {poison_id} (POST "
            f"/v1/chat/completions, {len(poison)} bytes, non-streamed, received ") in described
    assert "UTC, dropped before answering): that request is the likely cause (request id = first 12 hex digits of " \
           "the body's sha256; answered 502, not re-sent)" in described
    assert described in caplog.text  # the journal line says the same


def test_a_server_that_goes_down_mid_stream_is_reported_with_that_stream_as_the_likely_cause(rig: Rig) -> None:
    backend, url, _, _, crashes = rig
    body = json.dumps(chat_body("STREAM_THEN_POISON", stream=True)).encode()
    sent_at = time.time()
    with httpx.Client(timeout=30) as client, client.stream(
            "POST", f"{url}/v1/chat/completions", content=body, headers={"content-type": "application/json"}) as answer:
        assert answer.status_code == 200
        text = b"".join(answer.iter_bytes()).decode()
    answered_at = time.time()
    assert text.startswith('data: {"choices"') and "the backend dropped the stream" in text  # an event, then the error
    eventually(lambda: crashes, "the crash report", timeout_s=GATHER_S + 20)
    [crash] = crashes
    [dropped] = crash.dropped
    assert (dropped.request_id, dropped.phase, dropped.stream, dropped.profile) == (
        hashlib.sha256(body).hexdigest()[:12], "mid-stream", True, "plain")
    assert sent_at <= dropped.received_at <= answered_at  # the report's "received HH:MM:SS" is the request's
    assert backend.poison_seen == 1


def test_a_crash_with_several_requests_in_flight_lists_each_and_blames_none_for_sure() -> None:
    """Every request in flight drops at the same instant: the report lists each and says one of them is
    the likely cause."""
    dropped = [DroppedRequest(request_id(body), "POST", "/v1/chat/completions", len(body), stream, profile,
                              0.0, phase) for body, stream, profile, phase in (
        (b"first", True, "mtp", "mid-stream"), (b"second", False, None, "before answering"))]
    described = Crash(tuple(dropped)).describe()
    assert described.startswith("llama-server (profile mtp) went down with 2 requests in flight, all dropped: ")
    assert (f"{request_id(b'first')} (POST /v1/chat/completions, 5 bytes, streamed, received 00:00:00 UTC, "
            f"dropped mid-stream); {request_id(b'second')} (POST /v1/chat/completions, 6 bytes, non-streamed, "
            "received 00:00:00 UTC, dropped before answering); one of them is the likely cause") in described


def test_a_stale_keep_alive_connection_to_a_live_server_is_retried_once(rig: Rig) -> None:
    backend, url, _, _, crashes = rig
    with httpx.Client(timeout=30) as client:
        assert client.post(f"{url}/v1/chat/completions", json=chat_body()).status_code == 200
        backend._crash_and_restart()  # a planned restart: the proxy's pooled connection is now dead
        assert client.post(f"{url}/v1/chat/completions", json=chat_body("after restart")).status_code == 200
    assert backend.poison_seen == 0
    # a 200 means the drop was judged survived: a crash is noted (and the client answered 502) only
    # when /health failed right after it
    assert crashes == []


def test_a_request_the_backend_drops_reaches_it_at_most_as_often_as_the_docs_say(rig: Rig) -> None:
    """resend.py and the README: a drop on a reused keep-alive connection to a server that still
    answers /health is re-sent once on a fresh connection; a drop on a fresh one never. So the
    backend sees the dropped request MAX_DELIVERIES times at most (it saw 9 before the rule was one)."""
    backend, url, _, _, _ = rig
    with httpx.Client(timeout=30) as client:
        # the proxy's first request: no pooled connection yet, so it goes on a fresh one and reaches the backend once
        first = client.post(f"{url}/v1/chat/completions", json=chat_body("DROP this"))
        assert first.status_code == 502 and "not re-sent" in first.text
        assert backend.drop_seen == 1
        assert client.post(f"{url}/v1/chat/completions", json=chat_body("fine")).status_code == 200  # now pooled
        # on the pooled connection, with /health answering: re-sent once on a fresh connection, then answered 502
        second = client.post(f"{url}/v1/chat/completions", json=chat_body("DROP that"))
        assert second.status_code == 502 and "not re-sent" in second.text
        assert backend.drop_seen == 1 + MAX_DELIVERIES
        assert client.post(f"{url}/v1/chat/completions", json=chat_body("fine again")).status_code == 200
